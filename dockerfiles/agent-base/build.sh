#!/usr/bin/env bash
# Assembles the FROM scratch base image for the real agents' recipes
# (dockerfiles/{claude-code,codex,gemini,augment-agent}/Dockerfile) from this
# host's own files, for hosts where no image registry answers:
#   kandev/agent-base:host   (override with KANDEV_AGENT_BASE_TAG: a full image
#                             reference such as my/base:1, or just a tag such
#                             as "dev" for kandev/agent-base:dev)
# Then build a recipe on it, with the Dockerfile alone as the context:
#   docker build --network host \
#     --build-arg KANDEV_AGENT_BASE_IMAGE=kandev/agent-base:host \
#     -t kandev/claude-code:latest - < dockerfiles/claude-code/Dockerfile
#
# The image holds: node, npm and npx (with npm's own directory), bash and sh,
# the coreutils/findutils/grep/sed/... that an agent and the recipes use, git
# with its whole exec path (git-remote-https and its libcurl included) and
# templates, the ssh client, the CA certificates, the dynamic loader and every
# shared library in the ldd closure of all of those (paths kept, merged /usr as
# on the host), /etc/passwd and /etc/group with root and agent (uid and gid
# 1000, home /home/agent, shell /bin/bash), all of glibc's runtime libraries
# (librt, libutil, ...: prebuilt binaries in npm packages load them),
# /etc/nsswitch.conf, /tmp (1777),
# /home/agent (owned by 1000:1000) and /workspace. It runs as root (the
# recipes install their npm package, then switch to agent).
#
# The files are streamed into `docker import` (one layer; hard links, such as
# git's 140-odd builtins, stay hard links). The image is labelled with a hash of
# this script, the tool versions and the file list (path, size, mtime); when an
# image with that label exists already, nothing is built (re-runs take a few
# seconds). Idempotent, works from any cwd, never pulls, needs no network.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tag="${KANDEV_AGENT_BASE_TAG:-kandev/agent-base:host}"
case "$tag" in
  */* | *:*) image="$tag" ;;
  *) image="kandev/agent-base:$tag" ;;
esac
hash_label="org.kandev.agent-base.hash"

die() { echo "error: $*" >&2; exit 1; }
log() { echo "==> $*" >&2; }

command -v docker >/dev/null 2>&1 || die "docker is not installed"
command -v ldd >/dev/null 2>&1 || die "ldd is missing on this host (Debian package libc-bin)"

# Tools the image must have (the recipes and the agents need them), then tools
# copied when the host has them. Each is looked up on the host's PATH (the
# program, not a shell builtin of the same name).
required=(
  node npm npx bash sh git ssh
  # coreutils
  basename cat chgrp chmod chown cp cut date df dirname du echo env false head
  id install ln ls mkdir mktemp mv nproc printf pwd readlink realpath rm rmdir
  seq sleep sort stat tail tee test touch tr true uname uniq wc whoami
  # findutils, grep, sed, awk, which, tar, gzip, getent
  find xargs grep sed awk which tar gzip gunzip zcat getent
)
optional=(
  ssh-keygen ssh-keyscan ssh-add scp egrep fgrep diff cmp patch xz unxz unzip
  bzip2 curl ps kill hostname less rg jq expr timeout nohup base64 sha256sum
  md5sum comm split tac od tty
)
missing=()
bins=()
for tool in "${required[@]}"; do
  if p="$(type -P "$tool")"; then
    bins+=("$p")
  else
    missing+=("$tool")
  fi
done
[ ${#missing[@]} -eq 0 ] || die "this host lacks: ${missing[*]} (node and npm: e.g. the nodejs package; git, openssh-client, coreutils, findutils, grep, sed, tar, gzip)"
for tool in "${optional[@]}"; do
  if p="$(type -P "$tool")"; then
    bins+=("$p")
  fi
done

node_bin="$(readlink -f "$(command -v node)")"
npm_dir="$(readlink -f "$(npm root -g)/npm")"
[ -f "$npm_dir/bin/npm-cli.js" ] || die "npm's own directory not found (looked in $npm_dir)"
git_exec="$(git --exec-path)"
[ -d "$git_exec" ] || die "git's exec path $git_exec is missing"
git_exec="$(readlink -f "$git_exec")"
[ -x "$git_exec/git-remote-https" ] || die "$git_exec/git-remote-https is missing: git cannot clone over HTTPS"
[ -f /etc/ssl/certs/ca-certificates.crt ] || die "/etc/ssl/certs/ca-certificates.crt is missing (Debian package ca-certificates)"

# The file list: canonical paths (no symlink among the directories leading to
# them), so that they extract to the same place in the image. Symlinks are kept
# as symlinks, and their targets are added too.
declare -A seen=()
paths=()   # files and symlinks
dirs=()    # whole directories (recursive)
elfs=()    # files to run ldd on

canon_dir() { # the path with its directory canonicalised (the last part kept)
  local p="$1" d
  d="${p%/*}"
  d="$(readlink -f "${d:-/}")" || return 1
  [ "$d" = / ] && d=""
  printf '%s/%s\n' "$d" "${p##*/}"
}

add() { # adds a file or a symlink and, for a symlink, what it points to
  local p q t
  p="$1"
  q="$(canon_dir "$p")" || die "cannot resolve $p"
  [ -n "${seen[$q]:-}" ] && return 0
  seen[$q]=1
  if [ -L "$q" ]; then
    paths+=("$q")
    t="$(readlink "$q")"
    case "$t" in
      /*) add "$t" ;;
      *) add "$(dirname "$q")/$t" ;;
    esac
  elif [ -f "$q" ]; then
    paths+=("$q")
    elfs+=("$q")
  elif [ -e "$q" ]; then
    die "$q is neither a file nor a symlink"
  else
    die "$p (as $q) does not exist"
  fi
}

add_dir() { # adds a whole directory, and the ELF files in it for ldd
  local d
  d="$(readlink -f "$1")"
  [ -n "${seen[$d/]:-}" ] && return 0
  seen[$d/]=1
  dirs+=("$d")
}

for b in "${bins[@]}"; do add "$b"; done
add "$node_bin"
add_dir "$npm_dir"
add_dir "$git_exec"
# git's templates (git init and clone warn without them), next to its prefix.
git_prefix="$(dirname "$(dirname "$git_exec")")"
for t in "$git_prefix/share/git-core" /usr/share/git-core; do
  [ -d "$t" ] && add_dir "$t"
done
# The git-* programs next to git (git-upload-pack, git-receive-pack, ...).
git_bindir="$(dirname "$(readlink -f "$(command -v git)")")"
for f in "$git_bindir"/git-*; do
  [ -e "$f" ] && add "$f"
done
# CA certificates: the bundle and the hashed directory, whose links point into
# /usr/share/ca-certificates (and /usr/local/share/ca-certificates).
add_dir /etc/ssl/certs
for d in /usr/share/ca-certificates /usr/local/share/ca-certificates; do
  [ -d "$d" ] && add_dir "$d"
done
for f in /etc/ssl/openssl.cnf /etc/ssh/ssh_config /etc/os-release /etc/gitconfig; do
  [ -e "$f" ] && add "$f"
done
[ -d /etc/ssh/ssh_config.d ] && add_dir /etc/ssh/ssh_config.d

# ELF files inside the directories (hard links counted once).
for d in "${dirs[@]}"; do
  while read -r f; do
    elfs+=("$f")
  done < <(find "$d" -type f \( -perm -u+x -o -name '*.so*' -o -name '*.node' \) -printf '%i %p\n' \
             | sort -u -k1,1 | cut -d' ' -f2-)
done

# The shared libraries and the dynamic loader, from ldd. ldd prints the whole
# closure: "libc.so.6 => /lib/.../libc.so.6 (0x…)", "/lib64/ld-linux-….so.2
# (0x…)" (the loader) and "linux-vdso.so.1 (0x…)" (in the kernel, skipped).
# One ldd run for all the ELF files (it prints a "file:" line before each).
is_elf() { local m; LC_ALL=C read -r -N4 m <"$1" 2>/dev/null && [ "$m" = $'\x7fELF' ]; }
dynamic=()
for f in "${elfs[@]}"; do
  is_elf "$f" && dynamic+=("$f")
done
deps="$(ldd "${dynamic[@]}" 2>&1 || true)"
if grep -q 'not found' <<<"$deps"; then
  grep -e ':$' -e 'not found' <<<"$deps" >&2
  die "ldd cannot find libraries these files need"
fi
while read -r lib; do
  add "$lib"
done < <(grep -o '/[^ ]*' <<<"$deps" | grep -v ':$' | sort -u)

# All of glibc's runtime libraries, next to the libc found above: prebuilt
# binaries and node addons that npm packages bring (Claude Code's binary,
# node-pty's pty.node) load librt, libutil, libdl, ... which none of the host
# tools here may need.
libc_dir="$(grep -o '/[^ ]*/libc\.so\.6' <<<"$deps" | sed -n 1p)"
[ -n "$libc_dir" ] || die "ldd found no libc.so.6"
libc_dir="${libc_dir%/*}"
for lib in libc.so.6 libm.so.6 libmvec.so.1 libdl.so.2 libpthread.so.0 librt.so.1 \
  libutil.so.1 libresolv.so.2 libanl.so.1 libnss_files.so.2 libnss_dns.so.2 \
  libnss_compat.so.2 libBrokenLocale.so.1 libc_malloc_debug.so.0 libthread_db.so.1 \
  libgcc_s.so.1 libstdc++.so.6 libz.so.1; do
  [ -e "$libc_dir/$lib" ] && add "$libc_dir/$lib"
done

# Everything listed once: drop the paths that lie inside a listed directory.
list="$(
  {
    printf 'D %s\n' "${dirs[@]}"
    printf 'F %s\n' "${paths[@]}"
  } | awk '
    $1 == "D" { d[substr($0, 3)] = 1; print substr($0, 3); next }
    { p = substr($0, 3); keep = 1
      for (x in d) if (index(p, x "/") == 1) { keep = 0; break }
      if (keep) print p }' | sort -u
)"

# The content hash: this script, the versions, and every file's path, size
# and mtime (directories walked).
versions="node $(node --version); npm $(npm --version); $(git --version); $(ssh -V 2>&1); $(ldd --version 2>&1 | sed -n 1p)"
hash="$(
  {
    sha256sum "$here/build.sh"
    echo "$versions"
    xargs -d '\n' sh -c 'exec find -P "$@" -printf "%p %s %T@ %m %l\n"' sh <<<"$list" | LC_ALL=C sort
  } | sha256sum | cut -c1-32
)"

# Images built on this one inherit its labels: the base itself is the one that
# docker import made, with this comment.
comment="kandev agent base from the host's files ($hash)"
existing=""
for id in $(docker images -q --no-trunc --filter "label=$hash_label=$hash" | sort -u); do
  if [ "$(docker image inspect -f '{{.Comment}}' "$id" 2>/dev/null)" = "$comment" ]; then
    existing="$id"
    break
  fi
done
if [ -n "$existing" ]; then
  current="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
  if [ "$current" != "$existing" ]; then
    docker tag "$existing" "$image"
  fi
  log "$image is up to date ($hash_label=$hash)"
  exit 0
fi

# The root filesystem: the host's files, then the generated ones.
umask 022
stage="$(mktemp -d "${TMPDIR:-/tmp}/kandev-agent-base.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
root="$stage/rootfs"
mkdir -p "$root"
# Merged /usr as on the host: /bin -> usr/bin and so on.
for d in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$d" ]; then
    ln -s "$(readlink "/$d")" "$root/$d"
  fi
done
log "copying $(wc -l <<<"$list") paths from the host"
# One tar, so hard links stay hard links; paths relative to /, extracted into
# rootfs/.
tar -C / -cf - --no-recursion --files-from=<(
  # The parent directories first (so they exist with the host's modes), then
  # the entries; directories in the list are walked by find.
  while read -r p; do
    d="$(dirname "$p")"
    while [ "$d" != / ] && [ -z "${seen[dir:$d]:-}" ]; do
      seen[dir:$d]=1
      echo "$d"
      d="$(dirname "$d")"
    done
  done <<<"$list" | sort -u | sed 's|^/||'
  xargs -d '\n' find -P <<<"$list" | sed 's|^/||'
) | tar -xpf - -C "$root" --numeric-owner --keep-directory-symlink

mkdir -p "$root/etc" "$root/tmp" "$root/home/agent" "$root/workspace" "$root/root" \
  "$root/usr/local/bin" "$root/var/tmp" "$root/run"
chmod 1777 "$root/tmp" "$root/var/tmp"
chmod 0700 "$root/root"
chown 1000:1000 "$root/home/agent"

# The non-root user the agents run as (uid and gid 1000).
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
agent:x:1000:1000:agent:/home/agent:/bin/bash
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
agent:x:1000:
EOF
cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd:         files
group:          files
shadow:         files
hosts:          files dns
networks:       files
protocols:      files
services:       files
ethers:         files
rpc:            files
EOF
# Docker bind-mounts its own over these at run time; present for builds.
: >"$root/etc/hosts"
: >"$root/etc/resolv.conf"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"

previous="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
log "docker import -> $image"
tar -C "$root" --numeric-owner -cf - . | docker import \
  --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
  --change "ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt" \
  --change "WORKDIR /" \
  --change "CMD [\"/bin/bash\"]" \
  --change "LABEL $hash_label=$hash" \
  --change "LABEL org.kandev.agent-base.versions=\"$versions\"" \
  --change "LABEL org.opencontainers.image.title=kandev-agent-base" \
  --change "LABEL org.opencontainers.image.description=\"Node, npm, git, ssh, bash and coreutils from the host, FROM scratch, for the Kandev agent recipes\"" \
  --message "$comment" \
  - "$image" >/dev/null
log "built $image ($hash_label=$hash)"
# The image this one replaces, if this script made it and nothing else uses it
# (no other tag, no image built on it: docker refuses then, which is fine).
if [ -n "$previous" ]; then
  if case "$(docker image inspect -f '{{.Comment}}' "$previous" 2>/dev/null)" in
       "kandev agent base from the host's files ("*) true ;; *) false ;; esac \
     && [ "$(docker image inspect -f '{{len .RepoTags}}' "$previous" 2>/dev/null)" = 0 ]; then
    docker rmi "$previous" >/dev/null 2>&1 || true
  fi
fi
