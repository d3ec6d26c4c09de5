/**
 * The one error type of the subc wire layer ({@link SubcWireError}): every refusal of
 * `lib/subc/` (a frame the envelope rules reject, a failed handshake, a connection file that
 * cannot be trusted, a launch nonce that cannot be read, a control body of the wrong shape, a
 * module session the daemon refused or left) throws it with a stable {@link SubcWireReason}.
 *
 * These are transport faults, not request errors: the connection (or the launch) cannot go on,
 * so the caller closes the socket or exits loudly. Nothing here maps to a contract error code;
 * the session that owns the socket decides what, if anything, to send back (an Error frame with
 * `invalid_hello`, `unknown_control_op`, …) and otherwise drops the connection.
 *
 * @module
 */

/**
 * Why a frame header broke the envelope rules (subc §1). The names follow the reference
 * decoder's `DecodeError` variants, in snake_case:
 *
 * - `unsupported_version`: `ver` (byte 4) is not 2; checked on the 5-byte prefix, before anything
 *   else is read;
 * - `frame_too_large`: `len` exceeds the 64 MiB cap (or a smaller configured cap); checked on the
 *   prefix, before the body is allocated;
 * - `unknown_frame_type`: `type` is not 0–11;
 * - `reserved_priority_bits`: flag bits 1–2 are 3;
 * - `reserved_admission_class`: flag bits 4–5 are 3;
 * - `sheddable_illegal_frame_type`: admission SHEDDABLE on a type other than Push or StreamData;
 * - `pure_header_frame_with_body`: Cancel, Ping, Pong or Goodbye with `len != 0`;
 * - `nonzero_epoch_on_control_channel`: channel 0 with `epoch != 0`;
 * - `truncated_frame`: the stream ended inside a frame.
 */
export type FrameRejectReason =
  | "unsupported_version"
  | "frame_too_large"
  | "unknown_frame_type"
  | "reserved_priority_bits"
  | "reserved_admission_class"
  | "sheddable_illegal_frame_type"
  | "pure_header_frame_with_body"
  | "nonzero_epoch_on_control_channel"
  | "truncated_frame";

/**
 * Why the pre-frame handshake failed (subc §1 "Auth"):
 *
 * - `auth_timeout`: the one overall deadline passed;
 * - `auth_closed`: the peer closed the connection mid-handshake;
 * - `auth_io`: reading or writing the socket failed;
 * - `auth_message_too_large`: a declared or encoded message length exceeds 4096 bytes (checked
 *   before the body is allocated);
 * - `auth_invalid_message`: a message that is not UTF-8 JSON of the expected shape (a nonce that
 *   is not 32 numbers 0–255, a missing field);
 * - `auth_key_too_short`: the key given to a handshake has fewer than 32 bytes;
 * - `invalid_server_proof`: the client found the server's proof wrong (wrong key, impostor);
 * - `daemon_id_mismatch`: the proof is right but the daemon is not the one the connection file
 *   names;
 * - `invalid_client_auth`: the server found the client's proof wrong.
 */
export type AuthFailReason =
  | "auth_timeout"
  | "auth_closed"
  | "auth_io"
  | "auth_message_too_large"
  | "auth_invalid_message"
  | "auth_key_too_short"
  | "invalid_server_proof"
  | "daemon_id_mismatch"
  | "invalid_client_auth";

/**
 * Why a connection file was refused (subc §1 "Connection file"):
 *
 * - `connection_file_not_found`: no file at the path (or, after discovery, at any candidate:
 *   `details.tried` lists each path with its reason);
 * - `connection_file_unreadable`: it exists but cannot be opened or read;
 * - `connection_file_foreign_owner`: it is not owned by this user;
 * - `connection_file_insecure_mode`: group or others have any permission bit (`mode & 0o077`);
 * - `connection_file_invalid_json`: not UTF-8 JSON;
 * - `connection_file_invalid_field`: a field is missing or of the wrong type (`details.field`
 *   names it, e.g. `endpoints.0.port`, `daemon_id`);
 * - `connection_file_unsupported_schema`: `schema` is not 1;
 * - `connection_file_wire_version_mismatch`: `wire_version` is present and not 2;
 * - `connection_file_no_endpoint`: `endpoints` is empty;
 * - `connection_file_key_too_short`: `key` has fewer than 32 bytes;
 * - `connection_file_unwritable`: {@link writeConnectionFile} could not publish it.
 */
export type ConnectionFileReason =
  | "connection_file_not_found"
  | "connection_file_unreadable"
  | "connection_file_foreign_owner"
  | "connection_file_insecure_mode"
  | "connection_file_invalid_json"
  | "connection_file_invalid_field"
  | "connection_file_unsupported_schema"
  | "connection_file_wire_version_mismatch"
  | "connection_file_no_endpoint"
  | "connection_file_key_too_short"
  | "connection_file_unwritable";

/**
 * Why the launch nonce could not be read (subc §8):
 *
 * - `launch_nonce_malformed`: the nonce (from the environment or the descriptor) is not 64
 *   lowercase hex digits, or not UTF-8;
 * - `launch_fd_malformed`: `SUBC_LAUNCH_NONCE_FD` is not `<fd>:<inode>`;
 * - `launch_fd_not_open`: nothing is open at that descriptor (what a process spawned by a module
 *   sees: it inherits the variable, not the pipe);
 * - `launch_fd_not_a_pipe`: the descriptor is open but is not a FIFO (left untouched);
 * - `launch_fd_wrong_pipe`: a FIFO with another inode (left untouched);
 * - `launch_fd_empty`: the pipe held no byte (left open, nothing consumed);
 * - `launch_fd_unreadable`: reading the pipe failed, or it held more than 4096 bytes;
 * - `launch_fd_unsupported`: this platform has no descriptor hand-off reader (Windows, or a Unix
 *   whose libc this build cannot call).
 *
 * Every `launch_fd_*` refusal is final: the environment copy is never used after a named
 * descriptor failed.
 */
export type LaunchNonceReason =
  | "launch_nonce_malformed"
  | "launch_fd_malformed"
  | "launch_fd_not_open"
  | "launch_fd_not_a_pipe"
  | "launch_fd_wrong_pipe"
  | "launch_fd_empty"
  | "launch_fd_unreadable"
  | "launch_fd_unsupported";

/**
 * Why a control body was refused (subc §2–§4):
 *
 * - `invalid_control_body`: not UTF-8 JSON, or not the shape of its schema (`details.field` names
 *   the first offending field, `details.op` the operation when known);
 * - `unsupported_negotiated_version`: a HELLO_ACK with `negotiated_ver != 2`.
 */
export type ControlBodyReason = "invalid_control_body" | "unsupported_negotiated_version";

/**
 * Why a module session with the daemon ended in failure, or could not start (subc §2–§4,
 * `lib/subc/module_session.ts`):
 *
 * - `daemon_unreachable`: nothing answers at the connection file's endpoint (the daemon is not
 *   running, or the file is stale);
 * - `hello_refused`: the daemon answered HELLO with a channel-0 Error (`details.code`:
 *   `version_unsupported`, `invalid_manifest`, `invalid_hello`, `duplicate_module_id`,
 *   `reserved_module`, …; `details.message`: the daemon's words);
 * - `hello_timeout`: no HELLO_ACK within the session's deadline;
 * - `unexpected_frame`: the daemon broke the session order (a first frame other than HELLO_ACK
 *   or a channel-0 Error);
 * - `daemon_gone`: the daemon closed the connection (end of stream) or it broke, while the
 *   module was registered;
 * - `module_init_failed`: initialising after HELLO_ACK failed (the store, the config, a lease;
 *   `cause` holds the error);
 * - `catalog_update_unsupported`: `catalog.update` was asked for, and HELLO_ACK's `subc_ops` does
 *   not list it;
 * - `catalog_update_refused`: the daemon answered `catalog.update` with an Error
 *   (`details.code`);
 * - `session_closed`: the session ended before a reply arrived, or a call came after it ended.
 */
export type ModuleSessionReason =
  | "daemon_unreachable"
  | "hello_refused"
  | "hello_timeout"
  | "unexpected_frame"
  | "daemon_gone"
  | "module_init_failed"
  | "catalog_update_unsupported"
  | "catalog_update_refused"
  | "session_closed";

/** Every stable reason a {@link SubcWireError} may carry. */
export type SubcWireReason =
  | FrameRejectReason
  | AuthFailReason
  | ConnectionFileReason
  | LaunchNonceReason
  | ControlBodyReason
  | ModuleSessionReason;

/** Options of {@link SubcWireError}. */
export interface SubcWireErrorOptions {
  /**
   * Structured facts for the caller and the log: the offending field, the values compared
   * (`{ver: 1}`, `{len, max}`, `{field: "endpoints.0.port"}`). Never a secret: no key byte, no
   * nonce, no proof.
   */
  details?: Record<string, unknown>;
  /** The underlying error. */
  cause?: unknown;
}

/**
 * A refusal of the subc wire layer (subc §1, §2, §8), with a stable {@link SubcWireReason}.
 * The message follows the house style ("Cannot X: reason; what to do"); callers branch on
 * `reason`, never on the message.
 *
 * @example Branch on the reason
 * ```ts
 * import { SubcWireError } from "./errors.ts";
 * import assert from "node:assert/strict";
 *
 * const err = new SubcWireError("unsupported_version", "Cannot decode frame: version 1", {
 *   details: { ver: 1 },
 * });
 * assert.equal(err.reason, "unsupported_version");
 * assert.equal(err.details?.ver, 1);
 * ```
 */
export class SubcWireError extends Error {
  /** The stable reason. */
  readonly reason: SubcWireReason;
  /** Structured facts (never secrets), or undefined. */
  readonly details: Record<string, unknown> | undefined;

  /**
   * @param reason The stable reason.
   * @param message House-style message: "Cannot …: …", no final period.
   * @param options `details` and `cause`.
   */
  constructor(reason: SubcWireReason, message: string, options: SubcWireErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "SubcWireError";
    this.reason = reason;
    this.details = options.details;
  }
}
