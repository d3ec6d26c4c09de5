/**
 * Fetching one pinned file over HTTP(S) into a partial file of the model cache: streamed to disk
 * while its SHA-256 is computed, resumed with `Range: bytes=N-` after a broken transfer, checked
 * against the pinned size and digest. {@link ModelCache.download} owns the locks and publishes
 * the verified partial as a blob; this module is the transfer alone.
 *
 * **Redirect policy.** Redirects (301, 302, 303, 307, 308) are followed by hand, at most
 * {@link MAX_REDIRECTS} hops. A hop is refused when it leaves http/https, when it goes from
 * https to http (a downgrade), or when it goes from a public host to a loopback, private or
 * link-local address (`localhost`, 127/8, 10/8, 172.16/12, 192.168/16, 169.254/16, 100.64/10,
 * `::1`, fc00::/7, fe80::/10; judged on the literal host, names are not resolved). Cross-origin
 * https hops are followed: Hugging Face answers with a redirect to its CDN, and the pinned
 * digest, not the origin, vouches for the bytes. A refused redirect is `download_failed
 * {reason: "http_status", http_status: <3xx>, redirect_refused: true, refusal, location}`.
 *
 * **Fault classes and retries (F27).** Transport faults are transient and retried inside the
 * call with backoff: an empty body (`detail: "empty_body"`), a body shorter than its
 * Content-Length or the pinned size (`"short_body"`), a connection reset or refused
 * (`"reset"`), no body bytes for `idleTimeoutMs` (`"idle_timeout"`). At most
 * {@link DEFAULT_RETRY_DELAYS_MS}`.length` (3) retries, waiting 0.5, 1 and 2 s, each ±25 %
 * jitter (`retryDelaysMs` overrides the list); each retry resumes with `Range` from the bytes
 * that arrived. When they are spent the call fails `download_failed {reason: "network", detail,
 * attempts}` (transient). A complete body (the pinned size, or its Content-Length) whose
 * digest is wrong is fetched once more from byte 0; a second wrong digest is `artifact_invalid
 * {reason: "digest_mismatch", expected, digest}` (permanent, naming both digests). A resumed
 * file whose digest is wrong restarts from byte 0 first (the partial was stale), not counted as
 * that retry. A `416` answer to `Range: bytes=N-` where the server's `Content-Range: bytes
 * *\/N` says the partial is already complete verifies the partial's digest (no bytes fetched).
 * A non-2xx answer is `download_failed {reason: "http_status", http_status}` (not retried); a
 * body longer than the pinned size is `artifact_invalid {reason: "size_mismatch"}`; going past
 * the storage cap or a full disk is `download_failed {reason: "storage_full"}` and removes the
 * partial. A local file fault other than a full disk (permissions, I/O) is thrown as it is,
 * never taken for a network failure. The partial is left for the caller
 * ({@link ./_ingest.ts} removes it when the download ends, whatever the outcome).
 *
 * @module
 */
import { sha256FileHash } from "../identity/sha256.ts";
import { sleep } from "../async.ts";
import { createHash } from "node:crypto";
import { SynapseError } from "../contract/errors.ts";
import type { LogSink } from "../log/log.ts";
import { isDiskFull, removeIfPresentSync, sizeIfPresentSync } from "./_store.ts";
import type { DownloadProgress } from "./types.ts";

/** Most redirect hops one download follows. */
export const MAX_REDIRECTS = 5;

/**
 * Waits before the retries of a transient transport fault (ms): 3 retries, 0.5, 1 and 2 s, each
 * with ±25 % jitter.
 */
export const DEFAULT_RETRY_DELAYS_MS: readonly number[] = [500, 1000, 2000];

/** Options of {@link fetchToPartial}. */
export interface FetchToPartialOptions {
  /** http(s) URL. */
  url: string;
  /** The partial file (`tmp/<hex>.partial`): resumed when present. */
  partialPath: string;
  /** Pinned SHA-256, 64 lowercase hex digits. */
  sha256Hex: string;
  /** Pinned size in bytes, when known. */
  size?: number | undefined;
  /** Logical file name for errors (`details.file`). */
  file: string;
  /** No body bytes for this long (ms) fails the attempt. */
  idleTimeoutMs: number;
  /** Bytes this partial may still grow to in total (storage cap minus everything else), or undefined for no cap. */
  capBytes?: number | undefined;
  fetch: typeof fetch;
  signal?: AbortSignal | undefined;
  onProgress?: ((p: DownloadProgress) => void) | undefined;
  log: LogSink;
  /**
   * Waits before each retry of a transient transport fault (ms; jittered ±25 %); its length is
   * the number of retries. @default {DEFAULT_RETRY_DELAYS_MS}
   */
  retryDelaysMs?: readonly number[] | undefined;
}

/** What a finished transfer left in the partial. */
export interface FetchedPartial {
  /** Bytes in the partial. */
  size: number;
  /** True when the bytes of an earlier attempt were kept and the rest fetched with Range. */
  resumed: boolean;
}

/** Thrown inside an attempt to start over from byte 0 (bad resume). */
class Restart extends Error {}

/** Thrown inside an attempt: a complete, non-resumed body whose digest is wrong. */
class WrongDigest extends Error {
  constructor(readonly error: SynapseError) {
    super(error.message);
  }
}

/** Wraps an error of a local file operation, so it is not taken for a network failure. */
class LocalFault extends Error {}

/** Awaits a local file operation, wrapping its error in {@link LocalFault}. */
async function local<T>(op: Promise<T>): Promise<T> {
  try {
    return await op;
  } catch (err) {
    if (err instanceof SynapseError) throw err;
    throw new LocalFault("local file operation failed", { cause: err });
  }
}

/**
 * Fetches `url` into `partialPath`, resuming from the bytes already there, and checks the pinned
 * size and digest (see the module doc for every failure). On success the partial is fsynced and
 * holds exactly the pinned bytes.
 *
 * @returns The size and whether the transfer resumed.
 * @throws {SynapseError} `download_failed` (transient) or `artifact_invalid` (permanent); the
 *   caller's `signal.reason` when it aborts (the partial is kept).
 */
export async function fetchToPartial(opts: FetchToPartialOptions): Promise<FetchedPartial> {
  const delays = opts.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS;
  let allowResume = true;
  let restarts = 0;
  let wrongDigests = 0;
  let retries = 0;
  for (;;) {
    try {
      return await attemptOnce(opts, allowResume);
    } catch (err) {
      if (err instanceof Restart) {
        if (++restarts > 3) {
          throw new Error("a download restarted more than 3 times. This is a bug");
        }
        opts.log("info", "synapse.models", "restarting a download from byte 0", {
          file: opts.file,
          why: err.message,
        });
        removeIfPresentSync(opts.partialPath);
        allowResume = false;
        continue;
      }
      if (err instanceof WrongDigest) {
        removeIfPresentSync(opts.partialPath);
        if (++wrongDigests > 1) throw err.error;
        opts.log("warn", "synapse.models", "a download's digest is wrong; fetching it once more", {
          file: opts.file,
          expected: String(err.error.details?.expected),
          digest: String(err.error.details?.digest),
        });
        allowResume = false;
        continue;
      }
      if (!isTransientTransfer(err)) throw err;
      const e = err as SynapseError;
      if (retries >= delays.length) {
        throw new SynapseError(
          e.code,
          e.message.replace(
            /; retry[^;]*$/,
            `; ${retries} retries did not help; try again later (the job starts over)`,
          ),
          {
            cause: e.cause,
            details: { ...e.details, attempts: retries + 1 },
          },
        );
      }
      const wait = jitter(delays[retries]!);
      retries++;
      opts.log("info", "synapse.models", "retrying a download after a transport fault", {
        file: opts.file,
        detail: String(e.details?.detail ?? ""),
        retry: retries,
        of: delays.length,
        wait_ms: Math.round(wait),
      });
      await sleep(wait, opts.signal);
    }
  }
}

/** A transport fault that a retry may cure: `download_failed {reason: "network"}`. */
function isTransientTransfer(err: unknown): boolean {
  return err instanceof SynapseError && err.code === "download_failed" &&
    err.details?.reason === "network";
}

/** `ms` ±25 %. */
function jitter(ms: number): number {
  return Math.max(0, ms * (0.75 + Math.random() * 0.5));
}

async function attemptOnce(
  opts: FetchToPartialOptions,
  allowResume: boolean,
): Promise<FetchedPartial> {
  const { partialPath, size } = opts;
  let offset = allowResume ? sizeIfPresentSync(partialPath) ?? 0 : 0;
  if (size !== undefined && offset > size) {
    removeIfPresentSync(partialPath);
    offset = 0;
  }
  if (size !== undefined && offset === size && offset > 0) {
    // A crash after the last byte but before the publish: only the digest is left to check.
    const hash = await sha256FileHash(partialPath, { chunkBytes: 4 * 1024 * 1024 });
    checkDigest(opts, hash.digest("hex"), true);
    return { size: offset, resumed: true };
  }
  const idle = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const arm = (): void => {
    clearTimeout(timer);
    timer = setTimeout(() => idle.abort(new Error("idle_timeout")), opts.idleTimeoutMs);
  };
  const signal = opts.signal === undefined
    ? idle.signal
    : AbortSignal.any([opts.signal, idle.signal]);
  let file: Deno.FsFile | undefined;
  let body: ReadableStreamDefaultReader<Uint8Array> | undefined;
  try {
    arm();
    const headers: Record<string, string> = { "accept-encoding": "identity" };
    if (offset > 0) headers["range"] = `bytes=${offset}-`;
    const res = await fetchFollowing(opts, headers, signal);
    let total: number | null = size ?? null;
    const length = contentLength(res);
    if (res.status === 206 && offset > 0) {
      const range = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(res.headers.get("content-range") ?? "");
      if (range === null || Number(range[1]) !== offset) {
        await res.body?.cancel();
        throw new Restart(
          `the server answered Range bytes=${offset}- with ${range?.[0] ?? "no Content-Range"}`,
        );
      }
      const whole = range[3] === "*" ? undefined : Number(range[3]);
      if (size !== undefined && whole !== undefined && whole !== size) {
        await res.body?.cancel();
        throw new Restart(`the resumed file has ${whole} bytes, not the pinned ${size}`);
      }
      total ??= whole ?? (length === undefined ? null : offset + length);
    } else if (res.status === 416 && offset > 0) {
      await res.body?.cancel();
      const whole = /^bytes \*\/(\d+)$/.exec(res.headers.get("content-range") ?? "");
      if (whole !== null && Number(whole[1]) === offset) {
        // The partial is complete already (a crash after its last byte): verify it.
        const hash = await local(sha256FileHash(partialPath, { chunkBytes: 4 * 1024 * 1024 }));
        checkDigest(opts, hash.digest("hex"), true);
        return { size: offset, resumed: true };
      }
      throw new Restart(`the server refused Range bytes=${offset}- (416)`);
    } else if (res.status === 200) {
      if (offset > 0) {
        opts.log("info", "synapse.models", "the server ignored Range; downloading from byte 0", {
          file: opts.file,
        });
      }
      offset = 0;
      if (size !== undefined && length !== undefined && length > size) {
        await res.body?.cancel();
        removeIfPresentSync(partialPath);
        throw sizeMismatch(opts, length, "Content-Length");
      }
      total ??= length ?? null;
    } else {
      await res.body?.cancel();
      throw downloadFailed(
        opts,
        "http_status",
        `the server answered HTTP ${res.status}`,
        { http_status: res.status },
      );
    }
    if (opts.capBytes !== undefined && total !== null && total > opts.capBytes) {
      await res.body?.cancel();
      removeIfPresentSync(partialPath);
      throw storageFull(opts, total);
    }
    if (res.body === null) throw downloadFailed(opts, "network", "the answer has no body");
    const resumed = offset > 0;
    const hash = resumed
      ? await local(sha256FileHash(partialPath, { upTo: offset, chunkBytes: 4 * 1024 * 1024 }))
      : createHash("sha256");
    file = await local(
      Deno.open(partialPath, { create: true, write: true, truncate: !resumed, mode: 0o600 }),
    );
    if (resumed) await local(file.seek(offset, Deno.SeekMode.Start));
    body = res.body.getReader();
    let done = offset;
    opts.onProgress?.({ bytes_done: done, bytes_total: total });
    while (true) {
      const chunk = await body.read();
      if (chunk.done) break;
      arm();
      const bytes = chunk.value;
      if (size !== undefined && done + bytes.length > size) {
        if (resumed) throw new Restart(`the resumed file runs past the pinned ${size} bytes`);
        removeIfPresentSync(partialPath);
        throw sizeMismatch(opts, done + bytes.length, "body");
      }
      if (opts.capBytes !== undefined && done + bytes.length > opts.capBytes) {
        file.close();
        file = undefined;
        removeIfPresentSync(partialPath);
        throw storageFull(opts, done + bytes.length);
      }
      await local(writeAll(file, bytes, opts));
      hash.update(bytes);
      done += bytes.length;
      opts.onProgress?.({ bytes_done: done, bytes_total: total });
    }
    clearTimeout(timer);
    await local(file.sync());
    file.close();
    file = undefined;
    if (done === offset) {
      throw downloadFailed(opts, "network", "the answer's body is empty", {
        detail: "empty_body",
      });
    }
    if (length !== undefined && done !== offset + length) {
      throw downloadFailed(
        opts,
        "network",
        `the body ended after ${done - offset} of ${length} bytes`,
        { detail: "short_body" },
      );
    }
    if (size !== undefined && done < size) {
      throw downloadFailed(
        opts,
        "network",
        `the body ended after ${done} of the pinned ${size} bytes`,
        { detail: "short_body" },
      );
    }
    checkDigest(opts, hash.digest("hex"), resumed);
    return { size: done, resumed };
  } catch (err) {
    if (err instanceof SynapseError || err instanceof Restart || err instanceof WrongDigest) {
      throw err;
    }
    if (opts.signal?.aborted) throw opts.signal.reason;
    if (err instanceof LocalFault) {
      // A fault of this machine's disk, not of the network: a full disk is storage_full, the
      // rest (permissions, I/O errors) is thrown as it is.
      if (!isDiskFull(err.cause)) throw err.cause;
      file?.close();
      file = undefined;
      removeIfPresentSync(partialPath);
      throw storageFull(opts, undefined, err.cause);
    }
    if (idle.signal.aborted) {
      throw downloadFailed(
        opts,
        "network",
        `no bytes arrived for ${opts.idleTimeoutMs} ms`,
        { detail: "idle_timeout" },
        err,
      );
    }
    // Cut mid-body (the connection closed before the announced length) or reset before it.
    const detail = body === undefined ? "reset" : "short_body";
    throw downloadFailed(opts, "network", networkCause(err), { detail }, err);
  } finally {
    clearTimeout(timer);
    if (file !== undefined) {
      // Keep what arrived for a resume, durably.
      try {
        await file.sync();
      } catch { /* the error that brought us here matters more */ }
      file.close();
    }
    if (body !== undefined) body.cancel().catch(() => {});
  }
}

/**
 * Compares the digest; a mismatch after a resume restarts, else throws {@link WrongDigest}
 * (retried once by {@link fetchToPartial}).
 */
function checkDigest(opts: FetchToPartialOptions, hex: string, resumed: boolean): void {
  if (hex === opts.sha256Hex) return;
  if (resumed) throw new Restart(`the resumed file's digest is sha256:${hex}`);
  throw new WrongDigest(digestMismatch(opts, hex));
}

function digestMismatch(opts: FetchToPartialOptions, hex: string): SynapseError {
  return new SynapseError(
    "artifact_invalid",
    `Cannot use ${opts.file} from ${opts.url}: its SHA-256 is sha256:${hex}, not the pinned ` +
      `sha256:${opts.sha256Hex}; check the pinned digest and the URL`,
    {
      details: {
        file: opts.file,
        reason: "digest_mismatch",
        expected: `sha256:${opts.sha256Hex}`,
        digest: `sha256:${hex}`,
        attempts: 2,
      },
    },
  );
}

/**
 * Why a redirect hop is refused (see the module doc), or `undefined` when it is followed.
 *
 * @param from The URL that answered with the redirect.
 * @param to The resolved `Location`.
 * @param hop 1 for the first redirect.
 * @returns `too_many_redirects`, `unsupported_scheme`, `https_downgrade`, `private_address`, or
 *   `undefined`.
 */
export function redirectRefusal(from: URL, to: URL, hop: number): string | undefined {
  if (hop > MAX_REDIRECTS) return "too_many_redirects";
  if (to.protocol !== "http:" && to.protocol !== "https:") return "unsupported_scheme";
  if (from.protocol === "https:" && to.protocol === "http:") return "https_downgrade";
  if (!isPrivateHost(from.hostname) && isPrivateHost(to.hostname)) return "private_address";
  return undefined;
}

/**
 * True for a loopback, private, link-local or unspecified host, judged on the literal host of a
 * URL (`localhost`, `*.localhost`, IPv4 and bracketed IPv6 literals; names are not resolved).
 *
 * @param hostname `URL.hostname` (IPv6 in brackets).
 */
export function isPrivateHost(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/\.$/, "");
  if (h === "localhost" || h.endsWith(".localhost")) return true;
  const v4 = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(h);
  if (v4 !== null) return isPrivateV4(v4.slice(1).map(Number));
  if (!h.startsWith("[")) return false;
  const v6 = h.slice(1, -1);
  if (v6 === "::1" || v6 === "::") return true;
  const mapped = /^::ffff:(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(v6);
  if (mapped !== null) return isPrivateV4(mapped.slice(1).map(Number));
  const hexMapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(v6);
  if (hexMapped !== null) {
    const hi = parseInt(hexMapped[1]!, 16);
    const lo = parseInt(hexMapped[2]!, 16);
    return isPrivateV4([hi >> 8, hi & 255, lo >> 8, lo & 255]);
  }
  const first = parseInt(v6.split(":")[0] || "0", 16);
  return (first & 0xfe00) === 0xfc00 || (first & 0xffc0) === 0xfe80;
}

function isPrivateV4([a, b]: number[]): boolean {
  return a === 127 || a === 10 || a === 0 || (a === 172 && b! >= 16 && b! <= 31) ||
    (a === 192 && b === 168) || (a === 169 && b === 254) || (a === 100 && b! >= 64 && b! <= 127);
}

/**
 * What went wrong on the network, with the cause Deno's `fetch` nests (`fetch failed` alone does
 * not say that a name did not resolve or a connection was refused).
 */
function networkCause(err: unknown): string {
  const e = err as { message?: string; cause?: unknown };
  const outer = e?.message ?? String(err);
  const inner = e?.cause instanceof Error ? e.cause.message : undefined;
  return inner !== undefined && !outer.includes(inner) ? `${outer}: ${inner}` : outer;
}

/** GETs `opts.url`, following redirects by hand under the policy of the module doc. */
async function fetchFollowing(
  opts: FetchToPartialOptions,
  headers: Record<string, string>,
  signal: AbortSignal,
): Promise<Response> {
  let current = new URL(opts.url);
  for (let hop = 1;; hop++) {
    let res: Response;
    try {
      res = await opts.fetch(current, { headers, redirect: "manual", signal });
    } catch (err) {
      if (err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied) {
        // Not the network's fault, and no retry fixes it: the process may not reach this host.
        throw new SynapseError(
          "backend_unavailable",
          `Cannot download ${current.href}: this process may not connect to ${current.host} (${
            (err as Error).message
          }); the ck-synapse launcher allows loopback and Hugging Face's hosts — add this host to SYNAPSE_ALLOW_NET (comma-separated host[:port]) and restart the server`,
          {
            cause: err,
            details: {
              file: opts.file ?? null,
              host: current.host,
              backends: [{ backend: "download", reason: "net_not_allowed" }],
            },
          },
        );
      }
      throw err;
    }
    if (![301, 302, 303, 307, 308].includes(res.status)) return res;
    await res.body?.cancel();
    const location = res.headers.get("location");
    const next = location === null ? undefined : URL.parse(location, current) ?? undefined;
    const refusal = next === undefined ? "no_location" : redirectRefusal(current, next, hop);
    if (refusal !== undefined) {
      throw downloadFailed(
        opts,
        "http_status",
        `the redirect from ${current.origin} to ${
          next?.href ?? "(no Location)"
        } is refused (${refusal})`,
        {
          http_status: res.status,
          redirect_refused: true,
          refusal,
          ...(next === undefined ? {} : { location: next.href }),
        },
      );
    }
    opts.log("debug", "synapse.models", "following a redirect", {
      file: opts.file,
      status: res.status,
      to: next!.origin,
    });
    current = next!;
  }
}

function contentLength(res: Response): number | undefined {
  const v = res.headers.get("content-length");
  return v !== null && /^\d+$/.test(v) ? Number(v) : undefined;
}

async function writeAll(
  file: Deno.FsFile,
  bytes: Uint8Array,
  opts: FetchToPartialOptions,
): Promise<void> {
  let off = 0;
  while (off < bytes.length) {
    const n = await file.write(bytes.subarray(off));
    if (n <= 0) throw downloadFailed(opts, "storage_full", "the disk accepted no more bytes");
    off += n;
  }
}

/**
 * `download_failed` (transient, retry after 1000 ms) with `{file, reason, url, ...extra}`.
 *
 * @param reason `network`, `http_status` or `storage_full` (`download_failed` in docs/operations.md
 * "model.load").
 */
export function downloadFailed(
  opts: { file: string; url: string },
  reason: "network" | "http_status" | "storage_full",
  why: string,
  extra: Record<string, unknown> = {},
  cause?: unknown,
): SynapseError {
  const hint = reason === "storage_full"
    ? "free disk space (`ck-synapse rm` a model no longer needed, or `ck-synapse cache gc`)"
    : reason === "network"
    ? "retry later"
    : "check the URL";
  return new SynapseError(
    "download_failed",
    `Cannot download ${opts.file} from ${opts.url}: ${why}; ${hint}`,
    {
      ...(cause === undefined ? {} : { cause }),
      details: { file: opts.file, reason, url: opts.url, ...extra },
    },
  );
}

function storageFull(
  opts: FetchToPartialOptions,
  bytes: number | undefined,
  cause?: unknown,
): SynapseError {
  const why = bytes === undefined
    ? "the disk is full"
    : `${bytes} bytes would exceed the cache's storage cap (${opts.capBytes} bytes left)`;
  return downloadFailed(opts, "storage_full", why, {}, cause);
}

function sizeMismatch(opts: FetchToPartialOptions, got: number, where: string): SynapseError {
  return new SynapseError(
    "artifact_invalid",
    `Cannot use ${opts.file} from ${opts.url}: the ${where} has ${got} bytes, not the pinned ` +
      `${opts.size}; check the pinned size and the URL`,
    {
      details: { file: opts.file, reason: "size_mismatch", expected_size: opts.size, size: got },
    },
  );
}
