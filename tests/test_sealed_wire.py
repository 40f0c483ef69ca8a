"""Sealed batches on the wire: HPKE (RFC 9180 A.1.1), Oblivious HTTP (RFC 9458 Appendix A), Binary
HTTP (RFC 9292), key configurations, padding classes, and the outbox's sealed container."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_sdk import bhttp, ohttp
from client_sdk.queue import DiskOutbox, StoredBatch, parse_stored, stored_bytes

H = bytes.fromhex

# RFC 9180 Appendix A.1.1: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, base mode.
A11 = {
    "info": "4f6465206f6e2061204772656369616e2055726e",
    "skEm": "52c4a758a802cd8b936eceea314432798d5baf2d7e9235dc084ab1b9cfa2f736",
    "pkEm": "37fda3567bdbd628e88668c3c8d7e97d1d1253b6d4ea6d44c150f741f1bf4431",
    "ikmE": "7268600d403fce431561aef583ee1613527cff655c1343f29812e66706df3234",
    "pkRm": "3948cfe0ad1ddb695d780e59077195da6c56506b027329794ab02bca80815c4d",
    "skRm": "4612c550263fc8ad58375df3f557aac531d26850903e55a9f23f21d8534e8ac8",
    "pt": "4265617574792069732074727574682c20747275746820626561757479",
    "ct0": "f938558b5d72f1a23810b4be2ab4f84331acc02fc97babc53a52ae8218a355a96d8770ac83d07bea87e13c512a",
    "ct1": "af2d7e9ac9ae7e270f46ba1f975be53c09f8d875bdc8535458c2494e8a6eab251c03d0c22a56b8ca42c2063b84",
    "exports": [("", "3853fe2b4035195a573ffc53856e77058e15d9ea064de3e59f4961d0095250ee"),
                ("00", "2e8f0b54673c7029649d4eb9d5e33bf1872cf76d623ff164ac185da9e88c21a5"),
                ("54657374436f6e74657874", "e9e43065102c3836401bed8c3c3c75ae46be1639869391d62c61f1ec7af54931")],
}

# RFC 9458 Appendix A: the complete example of a request and response.
A_SK_R = "3c168975674b2fa8e465970b79c8dcf09f1c741626480bd4c6162fc5b6a98e1a"
A_CONFIG = "01002031e1f05a740102115220e9af918f738674aec95f54db6e04eb705aae8e79815500080001000100010003"
A_REQUEST = "00034745540568747470730b6578616d706c652e636f6d012f"
A_SK_E = "bc51d5e930bda26589890ac7032f70ad12e4ecb37abb1b65b1256c9c48999c73"
A_ENC_REQUEST = ("010020000100014b28f881333e7c164ffc499ad9796f877f4e1051ee6d31bad19dec96c208b4726374e469135906"
                 "992e1268c594d2a10c695d858c40a026e7965e7d86b83dd440b2c0185204b4d63525")
A_RESPONSE = "0140c8"
A_SECRET = "62d87a6ba569ee81014c2641f52bea36"
A_NONCE = "c789e7151fcba46158ca84b04464910d"
A_ENC_RESPONSE = "c789e7151fcba46158ca84b04464910d86f9013e404feea014e7be4a441f234f857fbd"


def test_pyhpke_reproduces_rfc9180_a11_for_the_suite_we_seal_with():
    suite = ohttp._suite()
    pkr = suite.kem.deserialize_public_key(H(A11["pkRm"]))
    eks = suite.kem.derive_key_pair(H(A11["ikmE"]))
    assert eks.private_key.to_private_bytes() == H(A11["skEm"])
    enc, sender = suite.create_sender_context(pkr, H(A11["info"]), eks=eks)
    assert enc == H(A11["pkEm"])
    assert sender.seal(H(A11["pt"]), b"Count-0") == H(A11["ct0"])
    assert sender.seal(H(A11["pt"]), b"Count-1") == H(A11["ct1"])
    for context, value in A11["exports"]:
        assert sender.export(H(context), 32) == H(value)
    receiver = suite.create_recipient_context(enc, suite.kem.deserialize_private_key(H(A11["skRm"])), H(A11["info"]))
    assert receiver.open(H(A11["ct0"]), b"Count-0") == H(A11["pt"])


def test_rfc9458_appendix_a_request_and_response_byte_for_byte():
    config = ohttp._decode_one(H(A_CONFIG))
    assert (config.key_id, config.kem_id, config.suites) == (1, 0x20, ((1, 1), (1, 3)))
    assert ohttp.decode_key_configs(len(H(A_CONFIG)).to_bytes(2, "big") + H(A_CONFIG)) == [config]
    gateway_key = ohttp.PrivateKey.from_private(1, H(A_SK_R))
    assert gateway_key.config.public_key == config.public_key
    # the client side: the encapsulated request, then the response it decapsulates
    sealed = ohttp.seal_request(config, H(A_REQUEST), ephemeral_key=H(A_SK_E))
    assert sealed.envelope == H(A_ENC_REQUEST)
    assert sealed.secret == H(A_SECRET)
    assert ohttp.open_response(sealed, H(A_ENC_RESPONSE)) == H(A_RESPONSE)
    assert bhttp.decode_response(H(A_RESPONSE)) == bhttp.Response(200)
    # the gateway side: the request it decapsulates, then the response it encapsulates
    opened = ohttp.open_request({1: gateway_key}, H(A_ENC_REQUEST))
    assert opened.message == H(A_REQUEST) and opened.secret == H(A_SECRET)
    assert bhttp.decode_request(opened.message) == bhttp.Request("GET", "https", "example.com", "/")
    assert ohttp.seal_response(opened, H(A_RESPONSE), response_nonce=H(A_NONCE)) == H(A_ENC_RESPONSE)


def test_a_request_that_does_not_open_is_a_key_problem_and_a_foreign_response_does_not_open():
    key = ohttp.PrivateKey.generate(3)
    other = ohttp.PrivateKey.generate(3)
    sealed = ohttp.seal_request(key.config, b"x" * 50)
    with pytest.raises(ohttp.KeyProblem, match="unknown"):
        ohttp.open_request({4: key}, sealed.envelope)
    with pytest.raises(ohttp.KeyProblem, match="does not open"):
        ohttp.open_request({3: other}, sealed.envelope)   # a reused id under another key
    tampered = bytearray(sealed.envelope)
    tampered[-1] ^= 1
    with pytest.raises(ohttp.KeyProblem):
        ohttp.open_request({3: key}, bytes(tampered))
    with pytest.raises(ohttp.OhttpError, match="shorter"):
        ohttp.open_request({3: key}, sealed.envelope[:40])
    opened = ohttp.open_request({3: key}, sealed.envelope)
    answer = ohttp.seal_response(opened, b"\x01\x40\xc8")
    assert ohttp.open_response(sealed, answer) == b"\x01\x40\xc8"
    another = ohttp.seal_request(key.config, b"x" * 50)          # another request's context
    with pytest.raises(ohttp.OhttpError, match="does not open"):
        ohttp.open_response(another, answer)
    assert answer[:16] != ohttp.seal_response(opened, b"\x01\x40\xc8")[:16]   # a fresh nonce each time


def test_two_seals_of_the_same_batch_share_no_bytes_after_the_header():
    key = ohttp.PrivateKey.generate(0)
    msg = ohttp.inner_request(b"\x83" + os.urandom(100))
    a, b = ohttp.seal_request(key.config, msg), ohttp.seal_request(key.config, msg)
    assert a.envelope[:7] == b.envelope[:7] == bytes([0, 0, 0x20, 0, 1, 0, 1])
    assert a.enc != b.enc and a.envelope[7:] != b.envelope[7:]


# --- Binary HTTP -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, encoded", [(0, "00"), (63, "3f"), (64, "4040"), (16383, "7fff"), (16384, "80004000"),
                                        (2**30 - 1, "bfffffff"), (2**30, "c000000040000000")])
def test_varints_are_quic_shortest_form(n, encoded):
    assert bhttp.encode_varint(n).hex() == encoded
    assert bhttp._Reader(H(encoded)).varint() == n


field_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(method=st.sampled_from(["POST", "GET", "PUT"]), path=st.text(alphabet="/abcxyz09", min_size=1, max_size=30),
       headers=st.lists(st.tuples(field_names, st.binary(max_size=40)), max_size=5),
       content=st.binary(max_size=3000), pad=st.integers(0, 500))
def test_binary_http_requests_round_trip_with_any_padding(method, path, headers, content, pad):
    req = bhttp.Request(method, "https", "", path, tuple(headers), content)
    raw = bhttp.encode_request(req)
    assert bhttp.decode_request(raw) == req
    assert bhttp.decode_request(bhttp.encode_request(req, len(raw) + pad)) == req


@settings(max_examples=200, deadline=None)
@given(status=st.integers(200, 599), headers=st.lists(st.tuples(field_names, st.binary(max_size=40)), max_size=5),
       content=st.binary(max_size=2000), pad=st.integers(0, 300))
def test_binary_http_responses_round_trip_with_any_padding(status, headers, content, pad):
    resp = bhttp.Response(status, tuple(headers), content)
    raw = bhttp.encode_response(resp)
    assert bhttp.decode_response(bhttp.encode_response(resp, len(raw) + pad)) == resp


def test_binary_http_refuses_what_is_not_a_known_length_message():
    good = bhttp.encode_request(bhttp.Request("POST", "https", "", "/v1/reports", (), b"abc"), 64)
    with pytest.raises(bhttp.BinaryHTTPError, match="padding"):
        bhttp.decode_request(good[:-1] + b"\x01")
    with pytest.raises(bhttp.BinaryHTTPError, match="framing"):
        bhttp.decode_request(b"\x02" + good[1:])
    with pytest.raises(bhttp.BinaryHTTPError, match="framing"):
        bhttp.decode_response(good)
    with pytest.raises(bhttp.BinaryHTTPError):
        bhttp.decode_request(good[:5])
    upper = b"\x00\x04POST\x05https\x00\x01/" + b"\x06\x01A\x03abc"
    with pytest.raises(bhttp.BinaryHTTPError, match="lower case"):
        bhttp.decode_request(upper)
    with pytest.raises(bhttp.BinaryHTTPError, match="final"):
        bhttp.decode_response(b"\x01\x42\x58")   # 600
    with pytest.raises(bhttp.BinaryHTTPError):
        bhttp.decode_response(b"\x01\x40\x64\x00")   # a 100 and no final response
    # an informational response before the final one is skipped
    assert bhttp.decode_response(b"\x01\x40\x66\x00\x40\xc8").status == 200


# --- key configurations -------------------------------------------------------------------------------------
def test_key_configuration_documents_round_trip_and_any_encoding_error_rejects_the_whole_document():
    a, b = ohttp.PrivateKey.generate(7).config, ohttp.PrivateKey.generate(8).config
    doc = ohttp.encode_key_configs([a, b])
    assert ohttp.decode_key_configs(doc) == [a, b]
    assert ohttp.choose(ohttp.decode_key_configs(doc)) == a
    for bad in (b"", doc[:-1], doc + b"\x00", doc[:2] + b"\x00\x99" + doc[4:],
                b"\x00\x05\x01\x00\x20\x00\x00"):
        with pytest.raises(ohttp.OhttpError):
            ohttp.decode_key_configs(bad)
    p256 = ohttp.KeyConfig(9, 0x0010, b"\x04" + bytes(64))
    assert ohttp.decode_key_configs(ohttp.encode_key_configs([p256, a])) == [p256, a]
    assert ohttp.choose([p256, a]) == a           # the first one this SDK can seal to
    with pytest.raises(ohttp.OhttpError, match="X25519"):
        ohttp.choose([p256])


# --- padding classes ------------------------------------------------------------------------------------------
def test_padding_classes_and_envelope_lengths():
    assert [ohttp.padded_length(n) for n in (1, 1024, 1025, 4096, 4097, 1 << 20, (1 << 20) + 1, 3 << 20)] == \
        [1024, 1024, 4096, 4096, 16384, 1 << 20, 2 << 20, 3 << 20]
    key = ohttp.PrivateKey.generate(1)
    seen = {}
    for size in (40, 300, 900, 1024 - ohttp.MAX_FRAMING, 1500, 4000, 60_000, 1 << 20):
        msg = ohttp.inner_request(os.urandom(size))
        env = ohttp.seal_request(key.config, msg).envelope
        assert len(msg) in ohttp.PAD_CLASSES or len(msg) % ohttp.PAD_CLASSES[-1] == 0
        assert len(env) == len(msg) + ohttp.ENVELOPE_OVERHEAD
        assert len(env) <= ohttp.sealed_size_limit(max(size, 1))
        seen.setdefault(len(env), []).append(size)
    # every batch up to the first class's capacity gives one and the same envelope length
    assert seen[1024 + ohttp.ENVELOPE_OVERHEAD] == [40, 300, 900, 1024 - ohttp.MAX_FRAMING]
    assert bhttp.decode_request(ohttp.inner_request(b"\x83abc")).headers == (("content-type", b"application/msgpack"),)
    # responses: an acknowledgement and a problem document have the same length
    ack = ohttp.inner_response(200, [("content-type", "application/json")], b'{"accepted": 5, "duplicate": false}')
    prob = ohttp.inner_response(422, [("content-type", "application/problem+json")], b"{" + b"x" * 400 + b"}")
    assert len(ack) == len(prob) == ohttp.RESPONSE_PAD


def test_inner_request_is_the_padded_binary_http_encoding_of_the_batch_request():
    # ohttp.inner_request writes a cached head and one run of zeros; it must stay byte for byte
    # bhttp.encode_request padded to the class, across every varint length and class boundary
    req = bhttp.Request("POST", "https", "", ohttp.INNER_PATH, (("content-type", ohttp.INNER_CONTENT_TYPE),))
    head = len(bhttp.request_head(req))
    sizes = {0, 1, 63, 64, 16383, 16384, 70_000}
    for cls in ohttp.PAD_CLASSES[:4]:
        for framing in (head + 1 + 1, head + 2 + 1, head + 4 + 1):   # head, length varint, trailer byte
            sizes |= {cls - framing - 1, cls - framing, cls - framing + 1}
    for size in sorted(n for n in sizes if n >= 0):
        batch = os.urandom(size)
        raw = bhttp.encode_request(dataclasses.replace(req, content=batch))
        assert ohttp.inner_request(batch) == bhttp.encode_request(
            dataclasses.replace(req, content=batch), ohttp.padded_length(len(raw))), size


# --- the outbox keeps the envelope ----------------------------------------------------------------------------
def test_a_sealed_batch_file_keeps_the_batch_and_its_envelope_and_a_plain_file_is_unchanged(tmp_path):
    key = ohttp.PrivateKey.generate(2)
    body = b"\x83" + os.urandom(60)
    batch = StoredBatch(os.urandom(16), body, 3, 1_700_000_000.0)
    assert stored_bytes(batch) == body and parse_stored(body) == (body, None)
    batch.sealed = ohttp.seal_request(key.config, ohttp.inner_request(body))
    back_body, back_sealed = parse_stored(stored_bytes(batch))
    assert back_body == body and back_sealed == batch.sealed
    with pytest.raises(ValueError):
        parse_stored(stored_bytes(batch)[:-2])
    now = time.time()
    outbox = DiskOutbox(tmp_path / "outbox", durable=False)
    plain = StoredBatch(os.urandom(16), body, 3, now)
    outbox.add(plain)
    claimed = outbox.claim(now)
    assert claimed.sealed is None and claimed.body == body
    claimed.sealed = batch.sealed
    outbox.update(claimed)          # the envelope is stored before the first send ...
    outbox.release(claimed)
    again = outbox.claim(now)
    assert again.body == body and again.sealed == batch.sealed   # ... and every resend reuses it
    assert (again.batch_id, again.reports) == (plain.batch_id, 3)


# --- the conformance vectors (conformance/vectors/sealed.json) ------------------------------------------------
def test_the_python_sdk_passes_the_sealed_conformance_vectors():
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parent.parent / "conformance" / "vectors" / "sealed.json").read_text())
    gateway = ohttp.PrivateKey.from_private(7, H(doc["gateway_private_key"]))
    assert gateway.config.encode().hex() == doc["key_config"]
    assert ohttp.decode_key_configs(H(doc["ohttp_keys"])) == [gateway.config]
    assert list(ohttp.PAD_CLASSES) == doc["pad_classes"] and ohttp.RESPONSE_PAD == doc["response_pad"]
    assert [[n, ohttp.padded_length(n)] for n, _ in doc["padded_lengths"]] == doc["padded_lengths"]
    sealed = []
    for case in doc["requests"]:
        inner = ohttp.inner_request(H(case["batch"]))
        assert inner.hex() == case["inner_request"] and len(inner) in ohttp.PAD_CLASSES
        s = ohttp.seal_request(gateway.config, inner, ephemeral_key=H(case["ephemeral_private_key"]))
        assert s.envelope.hex() == case["envelope"] and s.secret.hex() == case["response_secret"]
        opened = ohttp.open_request({7: gateway}, s.envelope)
        assert bhttp.decode_request(opened.message).content == H(case["batch"])
        sealed.append(s)
    for case in doc["responses"]:
        back = bhttp.decode_response(ohttp.open_response(sealed[case["request"]], H(case["encapsulated_response"])))
        assert back.status == case["status"] and back.content.decode() == case["body"]
        assert [[k, v.decode()] for k, v in back.headers] == case["headers"]
