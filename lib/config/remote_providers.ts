/**
 * The shape of one `remote_providers[]` entry of the user config (docs/remote.md, docs/config.md
 * "Remote providers"): the inference servers a remote lane sends work to. Strict: an unknown key
 * is refused. The provider runtime and the reading of its key are in lib/engines/remote/.
 *
 * @module
 */
import { z } from "zod";

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
