"""The JVM section of docs/guide-app-teams.md runs as written: its Kotlin and Java samples are the
files the SDK's Maven build compiles (client_sdk/jvm/src/test/{kotlin,java}/.../docs), word for
word, and each runs in a fresh JVM against a real `ldpt serve` of docs/examples/metrics.toml
(the documented endpoint comes from LDPT_ENDPOINT). The testing snippet is GuideTestingTest's body,
which `mvn verify` runs (tests/test_jvm_sdk.py). The Android block needs the Android SDK and is
only shown.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

import pytest

from tests.collector_support import ROOT, serving
from tests.doc_blocks import blocks
from tests.jvm_runtime_support import JVM, built_jvm_sdk

pytestmark = pytest.mark.e2e

GUIDE = ROOT / "docs" / "guide-app-teams.md"
DOCS = "dev/ldptelemetry/sdk/docs"


def guide_blocks(language: str) -> list[str]:
    found = [b.text for b in blocks(GUIDE) if b.language == language]
    assert found, f"docs/guide-app-teams.md has no {language} block"
    return found


def source_after_package(path) -> str:
    return path.read_text(encoding="utf-8").split("\n", 2)[2]


def test_the_guide_shows_the_compiled_samples_word_for_word() -> None:
    kotlin = guide_blocks("kotlin")
    main = [b for b in kotlin if "fun main()" in b]
    assert main == [source_after_package(JVM / "src/test/kotlin" / DOCS / "GuideKotlin.kt")]
    assert guide_blocks("java") == [source_after_package(JVM / "src/test/java" / DOCS / "QuickStart.java")]
    testing = (JVM / "src/test/kotlin" / DOCS / "GuideTestingTest.kt").read_text(encoding="utf-8")
    body = testing.split("// guide: begin\n", 1)[1].split("        // guide: end", 1)[0]
    assert textwrap.dedent(body) in kotlin, "the guide's testing snippet is not GuideTestingTest's body"
    assert any("ProcessLifecycleOwner" in b and "onAppBackground" in b for b in kotlin)


@pytest.mark.parametrize("main", ["dev.ldptelemetry.sdk.docs.GuideKotlinKt", "dev.ldptelemetry.sdk.docs.QuickStart"])
def test_the_samples_report_to_a_real_collector(tmp_path, main: str) -> None:
    cp = built_jvm_sdk()
    shutil.copy(ROOT / "docs" / "examples" / "metrics.toml", tmp_path / "metrics.toml")
    with serving(["--metrics", "metrics.toml", "--db", "store.sqlite", "--port", "0"], tmp_path) as server:
        done = subprocess.run(["java", f"-Duser.home={tmp_path}", "-cp", cp, main], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "LDPT_ENDPOINT": server.url})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "true", done.stdout + done.stderr
    state = tmp_path / ".local/share/myapp/ldpt"
    assert (state / "ledger.json").exists() and (state / "secret").stat().st_size == 32
    assert not list((state / "outbox").glob("*.ldpb*"))
