#!/bin/sh
# ck-synapse @VERSION@: Synapse as one self-extracting file (built by scripts/build; README
# "Install"). This POSIX sh header is followed by a gzip'd tar payload holding the program (main.ts,
# lib/, ffi/, workers/), the launchers, the pinned Deno, the runtime npm packages with their native
# builds (onnxruntime-node linux-x64, node-llama-cpp's linux-x64 prebuilt) and the two test models.
#
# First run of a build: the payload is checked against its SHA-256 (below), unpacked into
# <dir>.unpack-PID, every file checked against the tree's MANIFEST (sha256sum -c), a stamp written,
# and the directory renamed to <dir> in one step (a concurrent first run keeps whichever rename won).
#   <dir> = $SYNAPSE_UNPACK_DIR/<payload sha256>, else <data_home>/cortexkit/synapse/runtime/<sha256>
#   (<data_home>: $XDG_DATA_HOME, else $HOME/.local/share).
# Every run, before the program starts (a few small processes, no hashing of the payload):
#   1. this file's size equals the size recorded below (a truncated or appended copy is refused);
#   2. <dir>/.stamp names this payload digest, and the digest of (sha256 of MANIFEST, then the
#      size, mtime and path of every file and the target of every link in <dir>, sorted; the Deno
#      cache <dir>/.deno and the stamp itself left out) equals the one the stamp recorded at unpack.
# A tree that fails 2 (an edited, deleted or added file) is set aside and unpacked again, saying so
# on stderr. Then the tree's ck-synapse launcher runs with the arguments given (exec: same pid).
# Needs: sh, bash, tar, gzip, and GNU coreutils/findutils (stat, tail, sha256sum, find, sort, mv).
set -eu
SYNAPSE_PAYLOAD_SHA256=@PAYLOAD_SHA256@
payload_offset=@PAYLOAD_OFFSET@
artifact_size=@ARTIFACT_SIZE@

die() {
  printf 'ck-synapse: %s\n' "$*" >&2
  exit 2
}
self=$0
case $self in
*/*) ;;
*) [ -f "$self" ] || self=$(command -v -- "$self") || die "Cannot start: cannot find this file ($0)" ;;
esac
size=$(stat -L -c %s -- "$self") || die "Cannot start: cannot read this file ($self)"
[ "$size" = "$artifact_size" ] ||
  die "Cannot start: $self is $size bytes, this build is $artifact_size (a truncated or modified copy); install it again and check it against its ck-synapse.sha256"

if [ -n "${SYNAPSE_UNPACK_DIR:-}" ]; then
  base=$SYNAPSE_UNPACK_DIR
elif [ -n "${XDG_DATA_HOME:-}" ]; then
  base=$XDG_DATA_HOME/cortexkit/synapse/runtime
elif [ -n "${HOME:-}" ]; then
  base=$HOME/.local/share/cortexkit/synapse/runtime
else
  base=.local/share/cortexkit/synapse/runtime
fi
case $base in /*) ;; *) base=$PWD/$base ;; esac
base=${base%/}
dir=$base/$SYNAPSE_PAYLOAD_SHA256

# The digest the stamp keeps (rule 2 above), of the tree in $1.
tree_digest() {
  (cd "$1" && {
    sha256sum MANIFEST
    find . -path ./.deno -prune -o -path ./.stamp -prune -o \
      -type f -printf '%s %T@ %p\n' -o -type l -printf 'l %p -> %l\n' | LC_ALL=C sort
  } | sha256sum) | cut -c1-64
}

# Whether $dir holds this build, checked as rule 2 says.
tree_ok() {
  [ -f "$dir/.stamp" ] || return 1
  stamp_payload="" stamp_tree=""
  while IFS='=' read -r key value; do
    case $key in
    payload_sha256) stamp_payload=$value ;;
    tree_sha256) stamp_tree=$value ;;
    esac
  done <"$dir/.stamp"
  [ "$stamp_payload" = "$SYNAPSE_PAYLOAD_SHA256" ] && [ -n "$stamp_tree" ] &&
    [ "$(tree_digest "$dir")" = "$stamp_tree" ]
}

unpack() {
  umask 022
  mkdir -p "$base" || die "Cannot unpack into $base: cannot create it; set SYNAPSE_UNPACK_DIR to a directory you may write"
  tmp=$dir.unpack-$$
  rm -rf "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  trap 'rm -rf "$tmp"; exit 130' INT TERM HUP
  mkdir "$tmp"
  got=$(tail -c +$((payload_offset + 1)) "$self" | sha256sum | cut -c1-64)
  [ "$got" = "$SYNAPSE_PAYLOAD_SHA256" ] ||
    die "Cannot unpack: the payload's SHA-256 is $got, this build's is $SYNAPSE_PAYLOAD_SHA256 (a corrupted copy); install it again"
  tail -c +$((payload_offset + 1)) "$self" | gzip -dc | tar -xf - -C "$tmp" --no-same-owner ||
    die "Cannot unpack into $tmp: tar failed (disk full?); free space or set SYNAPSE_UNPACK_DIR"
  (cd "$tmp" && sha256sum --quiet --strict -c MANIFEST >&2) ||
    die "Cannot unpack into $tmp: files differ from the MANIFEST after unpacking; check the disk and install it again"
  printf 'payload_sha256=%s\nmanifest_sha256=%s\ntree_sha256=%s\n' "$SYNAPSE_PAYLOAD_SHA256" \
    "$(sha256sum <"$tmp/MANIFEST" | cut -c1-64)" "$(tree_digest "$tmp")" >"$tmp/.stamp"
  if [ -e "$dir" ] && ! tree_ok; then
    printf 'ck-synapse: %s differs from its stamp (a file was edited, added or removed): unpacking it again\n' "$dir" >&2
    mv -f "$dir" "$dir.broken-$$" && rm -rf "$dir.broken-$$"
  fi
  # Atomic: the rename either lands or finds a complete tree another first run put there.
  if ! mv -T "$tmp" "$dir" 2>/dev/null; then
    rm -rf "$tmp"
    tree_ok || die "Cannot unpack into $dir: it exists and does not hold this build; remove it"
  fi
  trap - EXIT INT TERM HUP
}

if ! tree_ok; then
  [ -e "$dir" ] || printf 'ck-synapse: first run of this build: unpacking into %s ...\n' "$dir" >&2
  unpack
fi
# The Deno cache (transpiled modules) lives and dies with the tree.
DENO_DIR=$dir/.deno
export DENO_DIR
exec "$dir/ck-synapse" "$@"
exit 2
__SYNAPSE_PAYLOAD_BELOW__
