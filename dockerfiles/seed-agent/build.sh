#!/usr/bin/env bash
# Builds the FROM scratch image kandev/seed-agent:latest (override the tag with
# KANDEV_SEED_AGENT_IMAGE): the seed's example agent (the one copy of its
# script, crates/kandev-acp/tests/fixtures/seed-agent.sh) with the host's bash, jq, uuidgen, sleep, env, id and touch, the shared
# libraries they need and the dynamic loader, found with ldd.
#
# Idempotent, works from any cwd. Never pulls. Needs jq and uuidgen on the host
# (Debian packages jq and uuid-runtime).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image="${KANDEV_SEED_AGENT_IMAGE:-kandev/seed-agent:latest}"
# What agent.sh runs (bash, jq, uuidgen, sleep), env for `#!/usr/bin/env`
# scripts, and id and touch for checking the user and its home.
tools=(bash jq uuidgen sleep env id touch)

if ! command -v ldd >/dev/null 2>&1; then
  echo "error: ldd is missing on this host (Debian package libc-bin)" >&2
  exit 1
fi
missing=()
for tool in "${tools[@]}"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    case "$tool" in
      jq) missing+=("jq (Debian package jq)") ;;
      uuidgen) missing+=("uuidgen (Debian package uuid-runtime)") ;;
      bash) missing+=("bash (Debian package bash)") ;;
      *) missing+=("$tool (Debian package coreutils)") ;;
    esac
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "error: the image copies these from the host, which lacks them:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  echo "install them, e.g. sudo apt-get install jq uuid-runtime" >&2
  exit 1
fi

# The image's files must be readable by the agent user whatever the caller's umask.
umask 022
context="$(mktemp -d "${TMPDIR:-/tmp}/kandev-seed-agent-context.XXXXXX")"
trap 'rm -rf "$context"' EXIT
rootfs="$context/rootfs"
mkdir -p "$rootfs/usr/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/home" \
  "$context/home/agent" "$context/workspace"
# Merged /usr, as on Debian: agent.sh's #!/bin/bash finds /usr/bin/bash.
ln -s usr/bin "$rootfs/bin"
chmod 1777 "$rootfs/tmp"

# Copies a file (symlinks followed) to the same path under rootfs/.
copy_file() {
  local src="$1"
  if [ ! -e "$rootfs$src" ]; then
    mkdir -p "$rootfs$(dirname "$src")"
    cp -L "$src" "$rootfs$src"
  fi
}

for tool in "${tools[@]}"; do
  bin="$(command -v "$tool")"
  cp -L "$bin" "$rootfs/usr/bin/$tool"
  # ldd lines: "libc.so.6 => /lib/.../libc.so.6 (0x…)", "/lib64/ld-linux-….so.2
  # (0x…)" (the loader) and "linux-vdso.so.1 (0x…)" (in the kernel, skipped).
  deps="$(ldd "$bin" 2>&1 || true)"
  if grep -q 'not found' <<<"$deps"; then
    echo "error: $bin needs libraries ldd cannot find:" >&2
    echo "$deps" >&2
    exit 1
  fi
  if grep -q 'not a dynamic executable' <<<"$deps"; then
    continue
  fi
  while read -r lib; do
    copy_file "$lib"
  done < <(grep -o '/[^ ]*' <<<"$deps" | grep -v '^/.*:$' || true)
done

# The non-root user the agent runs as (uid and gid 1000).
cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/bash
agent:x:1000:1000:agent:/home/agent:/bin/bash
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
agent:x:1000:
EOF

cp "$here/Dockerfile" "$context/Dockerfile"
install -m 0755 "$here/../../crates/kandev-acp/tests/fixtures/seed-agent.sh" "$context/agent.sh"

echo "==> docker build -t $image" >&2
docker build --pull=false -t "$image" "$context"
echo "==> built $image" >&2
