/**
 * The credential redactor: runs on every event before it is formatted (fleet-logging r2), so a
 * secret that reaches a log call never reaches a file or stderr. It replaces the secret, not
 * the line, with {@link REDACTED}.
 *
 * The rule, in order:
 *
 * 1. **By key.** A field (event or bound) whose key names a credential has its whole value
 *    replaced. The key is split into words at `_`, `-`, `.` and lower-to-upper case changes;
 *    its last word, lower-cased, is one of `key`, `apikey`, `token`, `secret`, `password`,
 *    `passwd`, `pwd`, `passphrase`, `authorization`, `auth`, `cookie`, `credential`,
 *    `credentials`, `nonce`, `signature`, `dsn` (`api_key`, `accessToken`, `client_secret`,
 *    `launch_nonce`, `request_key` — but not `tokens`, `max_tokens` or `key_id`).
 * 2. **By shape**, inside the message and every other string value:
 *    - `Authorization: <scheme> <credential>` (scheme kept), and `Bearer <token>`;
 *    - a JWT (`eyJ….….…`);
 *    - vendor tokens: `sk-…` (16+ characters after the dash), `ghp_` `gho_` `ghu_` `ghs_` `ghr_`
 *      `github_pat_…` (20+), `ckh_…`, AWS `AKIA` + 16;
 *    - URL user info: `scheme://user:pass@host` → `scheme://[REDACTED]@host`;
 *    - a credential query parameter: `?` or `&` then `access_token`, `token`, `key`, `api_key`,
 *      `apikey`, `password`, `secret`, `client_secret`, `signature` or `sig`, `=`, value (also in
 *      a URL's fragment, `#access_token=…`);
 *    - a long hex secret: a word of 32 or more hex digits (`[0-9A-Fa-f]`, bounded by characters
 *      that are not letters, digits or `_`: a 64-hex launch nonce or a bare SHA-256 goes; a
 *      `job_<32 hex>` id and a content digest written `sha256:<hex>` stay);
 *    - a long base64 secret: a word of 40 or more base64 or base64url characters
 *      (`A-Z a-z 0-9 + / _ -`, then at most two `=`), mixing upper case, lower case and digits,
 *      that does not start with `/` and is not inside a path (a run starting `/`, `./` or `~/`:
 *      a path is not a secret).
 *
 * A URL (`scheme://…`) stays readable: its host, port and path are kept as written (only the
 * vendor token shapes apply there: a JWT, `sk-…`, `ghp_…`, `ckh_…`, `AKIA…`; a 64-hex blob digest
 * or a long model name in a path is not a secret), its user info goes, and in its query and
 * fragment credential parameters (the names above, or any name rule 1 calls a credential:
 * `X-Amz-Signature`, `X-Amz-Credential`) lose their values while other values are redacted by shape.
 * `https://user:secret@host/path?token=abc&x=1` → `https://[REDACTED]@host/path?token=[REDACTED]&x=1`.
 *
 * Numbers and booleans are never redacted by shape (they are counts and flags).
 *
 * @module
 */
import type { LogFields } from "./line.ts";

/** What a redacted secret is replaced with. */
export const REDACTED = "[REDACTED]";

const CREDENTIAL_WORDS = new Set([
  "key",
  "apikey",
  "token",
  "secret",
  "password",
  "passwd",
  "pwd",
  "passphrase",
  "authorization",
  "auth",
  "cookie",
  "credential",
  "credentials",
  "nonce",
  "signature",
  "dsn",
]);

/**
 * True when a field key names a credential (rule 1 of the module doc).
 *
 * @example
 * ```ts
 * import assert from "node:assert";
 * import { isCredentialKey } from "./redact.ts";
 *
 * assert.ok(isCredentialKey("api_key") && isCredentialKey("accessToken"));
 * assert.ok(!isCredentialKey("tokens") && !isCredentialKey("key_id"));
 * ```
 */
export function isCredentialKey(key: string): boolean {
  let yes = keyCache.get(key);
  if (yes !== undefined) return yes;
  const words = key.split(/[_.\-]+|(?<=[a-z0-9])(?=[A-Z])/);
  yes = CREDENTIAL_WORDS.has(words.at(-1)?.toLowerCase() ?? "");
  // Keys are few (they are written in code); the cache is bounded all the same.
  if (keyCache.size < 4096) keyCache.set(key, yes);
  return yes;
}

const keyCache = new Map<string, boolean>();

/** A cheap test: text without any of these cannot hold a secret by shape. */
const SUSPECT =
  /bearer|authorization|eyJ|sk-|gh[pousr]_|github_pat_|ckh_|AKIA|:\/\/|[?&][A-Za-z_]+=|[0-9A-Fa-f]{32}|[A-Za-z0-9+/_-]{40}/i;

const SHAPES: [RegExp, string | ((...m: string[]) => string)][] = [
  // Authorization header text: keep the scheme word when there is one.
  [
    /\b(authorization["']?\s*[:=]\s*["']?)(?:(basic|bearer|digest|token)\s+)?[^\s"',;]+/gi,
    (_m, head, scheme) => `${head}${scheme ? `${scheme} ` : ""}${REDACTED}`,
  ],
  [/\b(bearer)\s+(?!\[REDACTED\])[A-Za-z0-9._~+/=-]+/gi, (_m, word) => `${word} ${REDACTED}`],
  [/\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/g, REDACTED],
  [/\bsk-[A-Za-z0-9_-]{16,}/g, REDACTED],
  [/\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}/g, REDACTED],
  [/\bckh_[A-Za-z0-9_-]+/g, REDACTED],
  [/\bAKIA[0-9A-Z]{16}\b/g, REDACTED],
  [/\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#@"]+@/gi, (_m, scheme) => `${scheme}${REDACTED}@`],
  [
    /([?&](?:access_token|token|key|api_key|apikey|password|secret|client_secret|signature|sig)=)[^&#\s"]+/gi,
    (_m, head) => `${head}${REDACTED}`,
  ],
  // A content digest written as `sha256:<hex>` names bytes, not a credential: it stays (a digest
  // mismatch logged without its digests could not be acted on).
  [/(?<![A-Za-z0-9_])(?<!sha256:)[0-9A-Fa-f]{32,}(?![A-Za-z0-9_])/g, REDACTED],
  [
    /(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_-]{40,}={0,2}(?![A-Za-z0-9+/_=-])/g,
    // No capture groups: the callback gets (match, offset, whole text).
    (...a: string[]) => {
      const m = a[0]!;
      return m.startsWith("/") || inPath(a[2]!, Number(a[1])) || !/[A-Z]/.test(m) ||
          !/[a-z]/.test(m) || !/[0-9]/.test(m)
        ? m
        : REDACTED;
    },
  ],
];

/**
 * True when the word at `at` of `text` lies inside a path: the run of characters it belongs to
 * (up to a space, a quote, `=`, `,` or a bracket) starts with `/`, `./` or `~/`. So
 * `/tmp/nc2.PA2X/data/cortexkit/synapse/logs` keeps its 40-character tail after the `.`.
 */
function inPath(text: string, at: number): boolean {
  let i = at;
  while (i > 0 && !/[\s"'=,()<>[\]{}]/.test(text[i - 1]!)) i--;
  return /^(?:\/|\.\/|~\/)/.test(text.slice(i, at + 1));
}

/**
 * Redacts secrets by shape (rule 2 of the module doc) in a message or a value.
 *
 * @param text Any text.
 * @returns The text with each secret replaced by {@link REDACTED} (the same string when none).
 *
 * @example
 * ```ts
 * import assert from "node:assert";
 * import { redactText } from "./redact.ts";
 *
 * assert.strictEqual(
 *   redactText("GET https://bob:hunter2@example.com/x?token=abc&n=1"),
 *   "GET https://[REDACTED]@example.com/x?token=[REDACTED]&n=1",
 * );
 * ```
 */
export function redactText(text: string): string {
  if (!SUSPECT.test(text)) return text;
  if (!text.includes("://")) return byShapes(text, SHAPES);
  // URLs are redacted part by part (module doc); the text between them by every shape.
  let out = "";
  let last = 0;
  for (const m of text.matchAll(URL_SHAPE)) {
    out += byShapes(text.slice(last, m.index), SHAPES) + redactUrl(m[0]);
    last = m.index + m[0].length;
  }
  return out + byShapes(text.slice(last), SHAPES);
}

function byShapes(text: string, shapes: typeof SHAPES): string {
  if (text === "" || !SUSPECT.test(text)) return text;
  let out = text;
  for (const [re, by] of shapes) {
    // deno-lint-ignore no-explicit-any
    out = out.replace(re, by as any);
  }
  return out;
}

/** A URL in running text: a scheme, `://`, then up to a space, quote or angle bracket. */
const URL_SHAPE = /\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>]+/gi;

/** The vendor token shapes only (a JWT, `sk-`, GitHub, `ckh_`, AWS): a URL's path keeps the rest. */
const PATH_SHAPES = SHAPES.slice(2, 7);

/** Credential parameter names of a query or fragment. */
const CREDENTIAL_PARAMS = new Set([
  "access_token",
  "token",
  "key",
  "api_key",
  "apikey",
  "password",
  "secret",
  "client_secret",
  "signature",
  "sig",
]);

/** One URL, redacted part by part: user info, path (vendor tokens), query and fragment values. */
function redactUrl(url: string): string {
  const m = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/is.exec(url);
  if (m === null) return byShapes(url, SHAPES);
  const [, scheme, authority, path, query, fragment] = m;
  const at = authority!.lastIndexOf("@");
  const host = at < 0 ? authority! : `${REDACTED}@${authority!.slice(at + 1)}`;
  return `${scheme}${host}${byShapes(path!, PATH_SHAPES)}${params(query)}${params(fragment)}`;
}

/** A `?query` or `#fragment`: credential parameters lose their value, others go by shape. */
function params(part: string | undefined): string {
  if (part === undefined || part.length <= 1) return part ?? "";
  const pairs = part.slice(1).split("&").map((pair) => {
    const eq = pair.indexOf("=");
    if (eq < 0) return byShapes(pair, SHAPES);
    const name = pair.slice(0, eq);
    return CREDENTIAL_PARAMS.has(name.toLowerCase()) || isCredentialKey(name)
      ? `${name}=${REDACTED}`
      : `${name}=${byShapes(pair.slice(eq + 1), SHAPES)}`;
  });
  return `${part[0]}${pairs.join("&")}`;
}

/**
 * Redacts a field set: credential keys lose their whole value, other string values are redacted
 * by shape.
 *
 * @param fields Event or bound fields.
 * @returns The same object when nothing changed, else a copy in the same key order.
 */
export function redactFields<F extends LogFields>(fields: F): F {
  let out: Record<string, string | number | boolean> | undefined;
  for (const key in fields) {
    const v = fields[key]!;
    let r: string | number | boolean = v;
    if (isCredentialKey(key)) r = REDACTED;
    else if (typeof v === "string") r = redactText(v);
    if (r !== v && out === undefined) out = { ...fields };
    if (out !== undefined) out[key] = r;
  }
  return (out ?? fields) as F;
}
