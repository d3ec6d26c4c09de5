/**
 * `remote_providers[]` of the user config (docs/remote.md): the inference servers a remote lane
 * sends work to — an OpenAI-compatible deployment (vLLM, Ray Serve, KServe, another gateway), a
 * text-embeddings-inference (TEI) deployment, or another Synapse. The entry's shape lives with the
 * config (lib/config/remote_providers.ts, re-exported here); this module reads its credential
 * ({@link readProviderKey}).
 *
 * Rules (contract §2 `credential_config_invalid`; design "remote lane"):
 * - the key comes from an environment variable (`api_key_env`) or a file of this user with mode
 *   0600 (`api_key_file`), never from the config file itself, and never appears in a log line, an
 *   error or a status row (only the variable's name does, never the file's path);
 * - `base_url` is `http` or `https`, without credentials, query or fragment; a host that is
 *   loopback (or resolves to it) needs `allow_loopback: true`, one in a private or link-local
 *   range `allow_private_network: true` (provider.ts checks the resolved addresses).
 *
 * @module
 */
import { SynapseError } from "../../contract/errors.ts";
import type { RemoteProviderConfig } from "../../config/remote_providers.ts";

export {
  BreakerConfigSchema,
  REMOTE_PROVIDER_DEFAULTS,
  REMOTE_PROVIDER_KINDS,
  type RemoteProviderConfig,
  type RemoteProviderKind,
  RemoteProviderSchema,
} from "../../config/remote_providers.ts";

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
