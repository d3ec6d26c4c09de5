/**
 * The version of this build, in a module of its own so that `ck-synapse version` and `--help`
 * load nothing else (the engines load only where a command needs them).
 *
 * @module
 */

/** Version of this build, printed by `ck-synapse version` and served in `/health`. */
export const SYNAPSE_VERSION = "0.1.0";
