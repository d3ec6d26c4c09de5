/**
 * `remote_providers[]` of the user config (docs/remote.md): the inference servers a remote lane
 * sends work to — an OpenAI-compatible deployment (vLLM, Ray Serve, KServe, another gateway), a
 * text-embeddings-inference (TEI) deployment, or another Synapse. This module is the entry's shape
 * ({@link RemoteProviderSchema}) and the reading of its credential ({@link readProviderKey}).
 *
 * Rules (contract §2 `credential_config_invalid`; design "remote lane"):
 * - the key comes from an environment variable (`api_key_env`) or a file of this user with mode
 *   0600 (`api_key_file`), never from the config file itself, and never appears in a log line, an
 *   error or a status row (only the variable's or file's name does);
 * - `base_url` is `http` or `https`, without credentials, query or fragment; a host that is
 *   loopback (or resolves to it) needs `allow_loopback: true`, one in a private or link-local
 *   range `allow_private_network: true` (provider.ts checks the resolved addresses).
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../../contract/errors.ts";

/** Provider wire shapes a remote lane speaks. */
export const REMOTE_PROVIDER_KINDS = ["openai", "tei", "synapse"] as const;

/** One provider's wire shape: `openai` (`/v1/embeddings`, `/v1/rerank`), `tei` (`/embed`, `/rerank`, `/info`), `synapse` (OpenAI's routes plus its fingerprint headers). */
export type RemoteProviderKind = (typeof REMOTE_PROVIDER_KINDS)[number];

/** Circuit breaker thresholds of a provider (breaker.ts). */
export const BreakerConfigSchema = z.strictObject({
  /**
   * Consecutive failed requests (a connection error, a timeout, a 5xx) that open the breaker.
   *
   * @default {5}
   */
  failure_threshold: z.int().min(1).max(1000).optional(),
  /**
   * ms the breaker stays open before one half-open trial request; doubles after each failed
   * trial, up to 60000.
   *
   * @default {5000}
   */
  open_ms: z.int().min(10).max(600_000).optional(),
});

/** One `remote_providers[]` entry as written (strict: an unknown key is refused). */
export const RemoteProviderSchema = z.strictObject({
  /** The provider's id, named by model entries' `provider` (letters, digits, `.`, `_`, `-`). */
  id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, {
    message: "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
  }),
  /** Wire shape of the provider. */
  kind: z.enum(REMOTE_PROVIDER_KINDS),
  /** `http(s)://host[:port][/prefix]`: the routes are appended to it. */
  base_url: z.string().min(1).max(2048),
  /** Name of the environment variable holding the bearer key. */
  api_key_env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/).optional(),
  /** Path of a file of this user, mode 0600, holding the bearer key (one line). */
  api_key_file: z.string().min(1).optional(),
  /**
   * Requests in flight to this provider at most (its keep-alive pool and the lane's slots).
   *
   * @default {4}
   */
  max_concurrency: z.int().min(1).max(256).optional(),
  /**
   * ms one request may take, connection included, before it fails as `provider_unavailable`.
   *
   * @default {30000}
   */
  timeout_ms: z.int().min(100).max(600_000).optional(),
  /** Allow a base URL that is, or resolves to, a loopback address. @default {false} */
  allow_loopback: z.boolean().optional(),
  /** Allow a base URL in a private, link-local or unique-local range. @default {false} */
  allow_private_network: z.boolean().optional(),
  /** TLS: `ca_file`, a PEM bundle trusted besides the system roots (a private CA). */
  tls: z.strictObject({ ca_file: z.string().min(1) }).optional(),
  /** Circuit breaker thresholds. */
  breaker: BreakerConfigSchema.optional(),
}).refine((p) => !(p.api_key_env !== undefined && p.api_key_file !== undefined), {
  message: "sets both api_key_env and api_key_file; keep one",
});

/** One provider entry as written. */
export type RemoteProviderConfig = z.infer<typeof RemoteProviderSchema>;

/** Defaults of a provider entry. */
export const REMOTE_PROVIDER_DEFAULTS = Object.freeze({
  max_concurrency: 4,
  timeout_ms: 30_000,
  failure_threshold: 5,
  open_ms: 5_000,
});

/**
 * Reads a provider's bearer key, when it names one.
 *
 * @param p The provider entry.
 * @param env Environment lookup. @default Deno.env.get
 * @returns The key, or undefined when the entry names none.
 * @throws {SynapseError} `credential_config_invalid` (permanent) `{provider, source, reason}` —
 *   `env_unset` (the variable is unset or empty), `file_unreadable`, `file_not_private` (not a
 *   regular file of this user with mode 0600), `empty`. The message names the variable (never
 *   the file's path, which other local users may read in status rows), never a key.
 */
export function readProviderKey(
  p: Pick<RemoteProviderConfig, "id" | "api_key_env" | "api_key_file">,
  env: (name: string) => string | undefined = (n) => Deno.env.get(n),
): string | undefined {
  const refuse = (source: string, reason: string, what: string): never => {
    throw new SynapseError(
      "credential_config_invalid",
      `Cannot use remote provider '${p.id}': ${what}`,
      { details: { provider: p.id, source, reason } },
    );
  };
  if (p.api_key_env !== undefined) {
    const v = env(p.api_key_env)?.trim();
    if (v === undefined || v === "") {
      return refuse(
        "api_key_env",
        "env_unset",
        `its api_key_env ${p.api_key_env} is unset or empty; export it in the server's environment and restart`,
      );
    }
    return v;
  }
  if (p.api_key_file === undefined) return undefined;
  const path = p.api_key_file;
  let info: Deno.FileInfo;
  try {
    info = Deno.lstatSync(path);
  } catch {
    return refuse("api_key_file", "file_unreadable", "its api_key_file cannot be read");
  }
  if (!info.isFile) {
    return refuse(
      "api_key_file",
      "file_not_private",
      "its api_key_file is not a regular file",
    );
  }
  if (Deno.build.os !== "windows") {
    if (info.uid !== Deno.uid() || ((info.mode ?? 0) & 0o077) !== 0) {
      return refuse(
        "api_key_file",
        "file_not_private",
        "its api_key_file must belong to this user with mode 0600 (chmod 600 it)",
      );
    }
  }
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch {
    return refuse("api_key_file", "file_unreadable", "its api_key_file cannot be read");
  }
  const key = text.trim();
  if (key === "" || /[\r\n]/.test(key)) {
    return refuse(
      "api_key_file",
      "empty",
      "its api_key_file must hold one key on one line",
    );
  }
  return key;
}
