/**
 * Sealed delivery, the `seal` option (the Python SDK's client_sdk/sealing.py, point by point):
 *
 *   import { Seal } from "@ldp-telemetry/sdk/sealed";          // Node, or a bundler
 *   new TelemetryClient({ endpoint, stateDir, seal: Seal.relay("https://relay.example/ldpt") });
 *
 * `Seal.gateway()` posts sealed batches to the collector's gateway, `Seal.relay(url)` to an
 * Oblivious HTTP relay in front of it, `Seal.shuffler(url)` to `ldpt shuffle` (settled on its
 * 202 acknowledgement). The key configuration comes from the collector (`GET
 * /.well-known/ohttp-gateway`, kept a day) unless given (`keyConfig`: the bytes of an
 * `application/ohttp-keys` document, or their base64 as `ldpt keys config` prints them). Each
 * batch is sealed once and the envelope stored with it in the outbox before its first send:
 * every retry sends the same bytes; after an `ohttp-key` answer (the key expired) it is sealed
 * again, once, to the refetched key. A sealed client never sends a batch in plain.
 *
 * This module is a separate entry (package.json `exports["./sealed"]`; the browser bundle
 * dist/ldpt-sealed.min.js): the core bundle carries none of it (docs/benchmarks.md). The option
 * wraps the client's device store (each batch sealed as it enters the outbox, the entry holding
 * the batch and its envelope) and its transport (a batch's POST becomes its envelope's), so the
 * client itself is the same with or without sealing: it settles the batch on the answer exactly
 * as on a plain one.
 */

import {
  GATEWAY_PATH, KEYS_TYPE, KEY_PROBLEM_TYPE, REQUEST_TYPE, RESPONSE_TYPE, type KeyConfig,
  chooseConfig, decodeKeyConfigs, decodeResponse, innerRequest, openResponse, sealRequest,
} from "./ohttp.js";
import type { DeviceStore, Outbox, StoredBatch } from "./state.js";
import { type SealedRequest, parseStored, storedBytes } from "./stored.js";
import { DEFAULT_TIMEOUT, REPORTS_PATH, Response, type Transport, TransportError, http } from "./transport.js";

/** Seconds a fetched key configuration is used before it is fetched again. */
export const KEY_CONFIG_TTL = 86_400;

export interface SealSettings {
  /** A pinned key configuration: `application/ohttp-keys` bytes or their base64. */
  keyConfig?: Uint8Array | string;
  /** Where to post instead of an HTTP transport to the URL (tests). */
  transport?: Transport;
  /** HTTP timeout (s) of the relay's or shuffler's transport. */
  timeout?: number;
  /** Wall clock in seconds (the key configuration's age). */
  clock?: () => number;
}

type Mode = "gateway" | "relay" | "shuffler";

function parseConfigs(raw: Uint8Array | string): KeyConfig[] {
  let bytes = raw;
  if (typeof raw === "string") {
    try {
      bytes = Uint8Array.from(atob(raw.trim()), (c) => c.charCodeAt(0));
    } catch {
      throw new TypeError("keyConfig text must be the base64 of an application/ohttp-keys document (`ldpt keys config`)");
    }
  }
  return decodeKeyConfigs(bytes as Uint8Array);
}

/** What the `seal` option is: wraps the client's device store and transport in a `Sealer`. */
export interface SealOption {
  readonly mode: Mode;
  readonly url?: string;
  open(client: { store: DeviceStore | null; transport: Transport | null }): void;
}

function option(mode: Mode, url: string | undefined, settings: SealSettings): SealOption {
  if (mode !== "gateway" && !url) throw new TypeError(`Seal.${mode}(url) needs the ${mode}'s URL`);
  const given = settings.keyConfig === undefined ? null : chooseConfig(parseConfigs(settings.keyConfig));
  return {
    mode, url,
    open(client) {
      const sealer = new Sealer(mode, url, given, client.transport as Transport, settings);
      client.store = sealer.store(client.store as DeviceStore);
      client.transport = sealer;
    },
  };
}

/** The one option: where sealed batches go (module docstring). */
export const Seal = {
  gateway: (settings: SealSettings = {}) => option("gateway", undefined, settings),
  relay: (url: string, settings: SealSettings = {}) => option("relay", url, settings),
  shuffler: (url: string, settings: SealSettings = {}) => option("shuffler", url, settings),
};

/** A gateway's or shuffler's clear 400 saying the envelope's key is unknown (RFC 9458 §5.3). */
export function isKeyProblem(r: Response): boolean {
  return r.status === 400 && (r.json() as { type?: unknown } | undefined)?.type === KEY_PROBLEM_TYPE;
}

/** A claimed batch as the client sees it (its plain body) -> the outbox's entry and envelope. */
interface Claimed { entry: StoredBatch; sealed: SealedRequest | null }

/**
 * The client's transport while sealing: `POST /v1/reports` of a batch becomes the POST of its
 * envelope (to the gateway, the relay or the shuffler), answered with the collector's inner
 * answer (or, in shuffler mode, an acknowledgement for the shuffler's 202); every other request
 * (the registry, domain files) goes to the collector unchanged. `store()` wraps the device
 * store so that a batch is sealed as it enters the outbox and its envelope kept there.
 */
export class Sealer implements Transport {
  readonly shuffler: boolean;
  readonly counters = { sealed: 0, resealed: 0, keyFetches: 0, undecryptableAnswers: 0 };
  private readonly post: Transport;
  private readonly path: string;
  private readonly clock: () => number;
  private fetched: KeyConfig | null = null;
  private fetchedAt = -Infinity;
  private outbox: Outbox | null = null;
  /** Claimed batches by the identity of the body handed to the client. */
  private readonly claimed = new WeakMap<Uint8Array, Claimed>();
  /** Envelopes being made, by body identity: a batch sent while it is being stored gets the same one. */
  private readonly making = new WeakMap<Uint8Array, Promise<SealedRequest>>();

  constructor(mode: Mode, url: string | undefined, private readonly given: KeyConfig | null,
    private readonly collector: Transport, settings: SealSettings = {}) {
    this.shuffler = mode === "shuffler";
    this.clock = settings.clock ?? (() => Date.now() / 1000);
    if (mode === "gateway") {
      this.post = settings.transport ?? collector;
      this.path = GATEWAY_PATH;
    } else {
      this.post = settings.transport ?? http.make(url as string, settings.timeout ?? DEFAULT_TIMEOUT);
      this.path = "";
    }
  }

  private cached(): KeyConfig | null {
    if (this.given) return this.given;
    return this.fetched && this.clock() - this.fetchedAt < KEY_CONFIG_TTL ? this.fetched : null;
  }

  /** The key configuration to seal to (TransportError when it cannot be fetched: retried later). */
  async config(refresh = false): Promise<KeyConfig> {
    const c = refresh ? null : this.cached();
    if (c) return c;
    if (this.given) return this.given;
    this.counters.keyFetches += 1;
    const r = await this.collector.request("GET", GATEWAY_PATH, undefined, { Accept: KEYS_TYPE });
    if (r.status !== 200 || (r.headers["content-type"] ?? "").split(";")[0].trim() !== KEYS_TYPE) {
      throw new TransportError(`the collector answered ${r.status} to GET ${GATEWAY_PATH}: no key configuration`);
    }
    try {
      this.fetched = chooseConfig(decodeKeyConfigs(r.body));
    } catch (exc) {
      throw new TransportError(`the collector's key configuration is unusable: ${(exc as Error).message}`);
    }
    this.fetchedAt = this.clock();
    return this.fetched;
  }

  private seal(body: Uint8Array, config?: KeyConfig): Promise<SealedRequest> {
    const ongoing = config ? undefined : this.making.get(body);
    if (ongoing) return ongoing;
    const made = (async () => {
      const sealed = await sealRequest(config ?? await this.config(), innerRequest(body));
      this.counters.sealed += 1;
      return sealed;
    })();
    this.making.set(body, made);
    made.catch(() => this.making.delete(body));
    return made;
  }

  /** The device store, its outbox sealing each batch as it is stored and handing out plain bodies. */
  store(inner: DeviceStore): DeviceStore {
    const sealer = this;
    const ob = inner.outbox;
    this.outbox = ob;
    const outbox: Outbox = {
      get counters() { return ob.counters; },
      async add(batchId, body, reports, created) {
        let entry = body;
        try {
          entry = storedBytes(body, await sealer.seal(body));
        } catch (exc) {
          if (!(exc instanceof TransportError)) throw exc; // no key configuration yet: sealed before sending
        }
        return ob.add(batchId, entry, reports, created);
      },
      async claim(now) {
        const entry = await ob.claim(now);
        if (entry === null) return null;
        const { body, sealed } = parseStored(entry.body);
        const batch = { ...entry, body };
        sealer.claimed.set(body, { entry, sealed });
        return batch;
      },
      release: (b) => ob.release(b),
      done: (b) => ob.done(b),
      pending: () => ob.pending(),
      clear: () => ob.clear(),
    };
    return {
      where: inner.where, outbox,
      loadSecret: () => inner.loadSecret(), readLedger: () => inner.readLedger(),
      updateLedger: (fn) => inner.updateLedger(fn), isOptedOut: () => inner.isOptedOut(),
      optOut: () => inner.optOut(), optIn: () => inner.optIn(),
      readRegistry: () => inner.readRegistry(), writeRegistry: (t) => inner.writeRegistry(t),
      readDomain: inner.readDomain?.bind(inner), writeDomain: inner.writeDomain?.bind(inner),
    };
  }

  /** Transport: batches go sealed, everything else to the collector as it is. */
  async request(method: string, path: string, body?: Uint8Array, headers: Record<string, string> = {}): Promise<Response> {
    if (method !== "POST" || path !== REPORTS_PATH || body === undefined) return this.collector.request(method, path, body, headers);
    const claimed = this.claimed.get(body);
    const persist = async (s: SealedRequest) => {
      if (claimed) await this.outbox?.update?.(claimed.entry, storedBytes(body, s));
    };
    let sealed = claimed?.sealed ?? null;
    if (sealed === null) {
      sealed = await this.seal(body);
      await persist(sealed);
    }
    for (let attempt = 0; ; attempt++) {
      const r = await this.post.request("POST", this.path, sealed.envelope, { Accept: RESPONSE_TYPE, "Content-Type": REQUEST_TYPE });
      if (attempt === 0 && isKeyProblem(r) && this.given === null) { // the key expired: seal again, once
        sealed = await this.seal(body, await this.config(true));
        this.counters.resealed += 1;
        if (claimed) claimed.sealed = sealed;
        await persist(sealed);
        continue;
      }
      if (claimed) claimed.sealed = sealed;
      return this.shuffler ? this.acked(r) : this.inner(sealed, r);
    }
  }

  /** The shuffler's 202 `{"stored": true}` settles the batch like the collector's ack; other answers as they are. */
  private acked(r: Response): Response {
    const doc = r.json() as { stored?: unknown; duplicate?: unknown } | undefined;
    if (r.status !== 202 || doc?.stored !== true) return r.status < 300 ? new Response(200, {}, new Uint8Array(0)) : r; // only 202 settles
    return new Response(200, { "content-type": "application/json" },
      new TextEncoder().encode(JSON.stringify({ accepted: 0, duplicate: doc.duplicate === true, stored: true })));
  }

  /** The collector's answer inside an encapsulated response (the outer one when it is not). */
  private async inner(sealed: SealedRequest, r: Response): Promise<Response> {
    if (r.status !== 200 || (r.headers["content-type"] ?? "").split(";")[0].trim() !== RESPONSE_TYPE) return r;
    try {
      const inner = decodeResponse(await openResponse(sealed, r.body));
      return new Response(inner.status, inner.headers, inner.body);
    } catch {
      this.counters.undecryptableAnswers += 1;
      return new Response(200, { "content-type": "text/plain" }, new Uint8Array(0)); // not the collector's: retried
    }
  }
}
