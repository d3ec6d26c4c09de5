#!/bin/sh
# ck-synapse @VERSION@: Synapse as one self-extracting file (built by scripts/build; see
# docs/install.md). This POSIX sh header is followed by a gzip'd tar payload holding the program
# (main.ts, lib/, ffi/, workers/), the launchers, the pinned Deno, the runtime npm packages with
# their native builds (onnxruntime-node linux-x64, node-llama-cpp's linux-x64 prebuilt) and the two
# test models.
#
# Where it unpacks: <dir> = $SYNAPSE_UNPACK_DIR/<payload sha256>, else
# <data_home>/cortexkit/synapse/runtime/<sha256> (<data_home>: $XDG_DATA_HOME, else
# $HOME/.local/share). Missing directories are made 0700. The base and <dir> must each be a real
# directory (not a symbolic link) of this user that neither group nor others may write, under
# parents of root or this user that others cannot write unless sticky (/tmp): the rules of the
# worker runtime dir (lib/workers/runtime_dir.ts). Anything else is refused, naming it, before
# anything in it runs: someone else's tree never runs as you.
#
# First run of a build: the payload is checked against its SHA-256 (below), unpacked into a 0700
# <dir>.unpack-PID, its MANIFEST checked against the MANIFEST digest this header carries, every
# file checked against the MANIFEST (sha256sum -c), a stamp written, and the directory renamed to
# <dir> in one step (a concurrent first run keeps whichever rename won).
# Every run, before the program starts (a few small processes, no hashing of the payload):
#   1. this file's size equals the size recorded below (a truncated or appended copy is refused);
#   2. the directory checks above;
#   3. <dir>/.stamp names this payload and MANIFEST digest, and the digest of (sha256 of MANIFEST,
#      then size, mtime, ctime, inode and path of every file and the target of every link in
#      <dir>, sorted; the Deno cache <dir>/.deno and the stamp left out) equals the one recorded
#      when the tree was last verified by content. The stamp is trusted only because no one else
#      can write in <dir> (2), and a ctime cannot be set back: an edit whose size and mtime were
#      restored still changes it.
# A tree that fails 3 is verified again by content (its MANIFEST digest, then every file, and no
# file the MANIFEST does not list): if it holds this build it is stamped again, else it is set
# aside and unpacked again, saying so on stderr. Then the tree's ck-synapse launcher runs with the
# arguments given (exec: same pid).
# Needs: sh, bash, tar, gzip, and GNU coreutils/findutils (stat, tail, sha256sum, find, sort, mv,
# readlink, id).
set -eu
SYNAPSE_PAYLOAD_SHA256=@PAYLOAD_SHA256@
SYNAPSE_MANIFEST_SHA256=@MANIFEST_SHA256@
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

uid=$(id -u)

# Refuses $1 unless it is a real directory of this user that group and others cannot write.
check_own_dir() {
  [ -L "$1" ] && die "Cannot use $1: it is a symbolic link (someone else's tree could run as you); remove it, or set SYNAPSE_UNPACK_DIR to a directory only you can write"
  [ -d "$1" ] || die "Cannot use $1: it is not a directory; remove it, or set SYNAPSE_UNPACK_DIR to a directory only you can write"
  own=$(stat -c '%u %a' -- "$1") || die "Cannot use $1: cannot stat it"
  o_uid=${own% *} o_mode=${own#* }
  [ "$o_uid" = "$uid" ] || die "Cannot use $1: it belongs to uid $o_uid, not to you (uid $uid); remove it, or set SYNAPSE_UNPACK_DIR to a directory only you can write"
  [ $((0$o_mode & 022)) -eq 0 ] || die "Cannot use $1: its mode $o_mode lets others write in it; chmod go-w it, or set SYNAPSE_UNPACK_DIR to a directory only you can write"
}

# Refuses the parents of $1 (as the kernel resolves them) unless each belongs to root or this user
# and others cannot write it, or it is sticky (/tmp): one stat for all of them.
check_parents() {
  p=$(readlink -f -- "$1/..") || die "Cannot use $1: cannot resolve its parent"
  set --
  while :; do
    set -- "$@" "$p"
    [ "$p" = / ] && break
    p=${p%/*}
    [ -n "$p" ] || p=/
  done
  stat -c '%u %a %n' -- "$@" | while read -r p_uid p_mode p_name; do
    if [ "$p_uid" != 0 ] && [ "$p_uid" != "$uid" ]; then
      echo "its parent $p_name belongs to uid $p_uid"
      break
    fi
    if [ $((0$p_mode & 022)) -ne 0 ] && [ $((0$p_mode & 01000)) -eq 0 ]; then
      echo "its parent $p_name (mode $p_mode) lets others replace what is in it"
      break
    fi
  done
}

# The digest the stamp keeps (rule 3 above), of the tree in $1.
tree_digest() {
  (cd "$1" && {
    sha256sum MANIFEST
    find . -path ./.deno -prune -o -path ./.stamp -prune -o \
      -type f -printf '%s %T@ %C@ %i %p\n' -o -type l -printf 'l %p -> %l\n' | LC_ALL=C sort
  } | sha256sum) | cut -c1-64
}

# Whether $dir holds this build by its stamp (rule 3 above).
tree_ok() {
  [ -f "$dir/.stamp" ] || return 1
  stamp_payload="" stamp_manifest="" stamp_tree=""
  while IFS='=' read -r key value; do
    case $key in
    payload_sha256) stamp_payload=$value ;;
    manifest_sha256) stamp_manifest=$value ;;
    tree_sha256) stamp_tree=$value ;;
    esac
  done <"$dir/.stamp"
  [ "$stamp_payload" = "$SYNAPSE_PAYLOAD_SHA256" ] &&
    [ "$stamp_manifest" = "$SYNAPSE_MANIFEST_SHA256" ] && [ -n "$stamp_tree" ] &&
    [ "$(tree_digest "$dir")" = "$stamp_tree" ]
}

# Whether the tree in $1 holds this build by content: its MANIFEST is the one this header names,
# every file it lists has its digest, and there is no other file (the Deno cache and the stamp
# aside).
tree_content_ok() {
  [ -f "$1/MANIFEST" ] && [ ! -L "$1/MANIFEST" ] || return 1
  [ "$(sha256sum <"$1/MANIFEST" | cut -c1-64)" = "$SYNAPSE_MANIFEST_SHA256" ] || return 1
  (cd "$1" && sha256sum --quiet --strict -c MANIFEST >/dev/null 2>&1) || return 1
  listed=$(cut -c67- <"$1/MANIFEST" | LC_ALL=C sort)
  found=$(cd "$1" && find . -path ./.deno -prune -o -path ./.stamp -prune -o \
    -path ./MANIFEST -prune -o -type f -printf '%P\n' | LC_ALL=C sort)
  [ "$listed" = "$found" ]
}

write_stamp() {
  digest=$(tree_digest "$1") || return 1
  printf 'payload_sha256=%s\nmanifest_sha256=%s\ntree_sha256=%s\n' "$SYNAPSE_PAYLOAD_SHA256" \
    "$SYNAPSE_MANIFEST_SHA256" "$digest" >"$1/.stamp.tmp" && mv -f "$1/.stamp.tmp" "$1/.stamp"
}

unpack() {
  tmp=$dir.unpack-$$
  rm -rf "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  trap 'rm -rf "$tmp"; exit 130' INT TERM HUP
  (umask 077 && mkdir "$tmp") || die "Cannot unpack into $base: cannot create $tmp; set SYNAPSE_UNPACK_DIR to a directory you may write"
  umask 022
  got=$(tail -c +$((payload_offset + 1)) "$self" | sha256sum | cut -c1-64)
  [ "$got" = "$SYNAPSE_PAYLOAD_SHA256" ] ||
    die "Cannot unpack: the payload's SHA-256 is $got, this build's is $SYNAPSE_PAYLOAD_SHA256 (a corrupted copy); install it again"
  tail -c +$((payload_offset + 1)) "$self" | gzip -dc | tar -xf - -C "$tmp" --no-same-owner ||
    die "Cannot unpack into $tmp: tar failed (disk full?); free space or set SYNAPSE_UNPACK_DIR"
  [ "$(sha256sum <"$tmp/MANIFEST" | cut -c1-64)" = "$SYNAPSE_MANIFEST_SHA256" ] ||
    die "Cannot unpack into $tmp: its MANIFEST is not this build's; install it again"
  (cd "$tmp" && sha256sum --quiet --strict -c MANIFEST >&2) ||
    die "Cannot unpack into $tmp: files differ from the MANIFEST after unpacking; check the disk and install it again"
  write_stamp "$tmp" || die "Cannot unpack into $tmp: cannot write its stamp"
  if [ -e "$dir" ] && ! tree_ok; then
    mv -f "$dir" "$dir.broken-$$" && rm -rf "$dir.broken-$$"
  fi
  # Atomic: the rename either lands or finds a complete tree another first run put there.
  if ! mv -T "$tmp" "$dir" 2>/dev/null; then
    rm -rf "$tmp"
    check_own_dir "$dir"
    tree_ok || die "Cannot unpack into $dir: it exists and does not hold this build; remove it"
  fi
  trap - EXIT INT TERM HUP
}

# Rule 2: the base (made 0700 when missing), its parents, and the tree directory if it is there.
if [ ! -e "$base" ] && [ ! -L "$base" ]; then
  (umask 077 && mkdir -p -- "$base") ||
    die "Cannot unpack into $base: cannot create it; set SYNAPSE_UNPACK_DIR to a directory you may write"
fi
check_own_dir "$base"
why=$(check_parents "$base")
[ -z "$why" ] || die "Cannot use $base: $why; set SYNAPSE_UNPACK_DIR to a directory only you can write"
if [ -e "$dir" ] || [ -L "$dir" ]; then
  check_own_dir "$dir"
fi

if ! tree_ok; then
  if [ ! -e "$dir" ]; then
    printf 'ck-synapse: first run of this build: unpacking into %s ...\n' "$dir" >&2
    unpack
  elif tree_content_ok "$dir"; then
    # Touched but whole (a copy, a restore): verified by content, stamped again.
    write_stamp "$dir" || die "Cannot use $dir: cannot write its stamp"
  else
    printf 'ck-synapse: %s differs from this build (a file was edited, added or removed): unpacking it again\n' "$dir" >&2
    unpack
  fi
fi
# The Deno cache (transpiled modules) lives and dies with the tree.
DENO_DIR=$dir/.deno
export DENO_DIR
exec "$dir/ck-synapse" "$@"
exit 2
__SYNAPSE_PAYLOAD_BELOW__
