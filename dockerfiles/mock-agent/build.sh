#!/usr/bin/env bash
# Builds the static kandev-mock-agent binary and the FROM scratch image
# kandev/mock-agent:latest (override the tag with KANDEV_MOCK_IMAGE).
#
# Idempotent, works from any cwd, honours CARGO_TARGET_DIR. Never pulls.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
triple="x86_64-unknown-linux-gnu"
image="${KANDEV_MOCK_IMAGE:-kandev/mock-agent:latest}"

# Cargo reads a relative CARGO_TARGET_DIR against its cwd; we cd to the repo,
# so anchor a relative value to the caller's cwd first.
target_dir="${CARGO_TARGET_DIR:-$root/target}"
case "$target_dir" in
  /*) ;;
  *) target_dir="$PWD/$target_dir" ;;
esac

echo "==> building kandev-mock-agent (static, release) into $target_dir" >&2
(
  cd "$root"
  # With --target, RUSTFLAGS reach only the target artifacts, not build scripts.
  RUSTFLAGS='-C target-feature=+crt-static' CARGO_TARGET_DIR="$target_dir" \
    cargo build --release --target "$triple" -p kandev-mock-agent
)
bin="$target_dir/$triple/release/kandev-mock-agent"

if command -v ldd >/dev/null 2>&1 && ldd "$bin" 2>&1 | grep -q '=>'; then
  echo "error: $bin is dynamically linked:" >&2
  ldd "$bin" >&2
  exit 1
fi

context="$(mktemp -d "${TMPDIR:-/tmp}/kandev-mock-agent-context.XXXXXX")"
trap 'rm -rf "$context"' EXIT
cp "$here/Dockerfile" "$context/Dockerfile"
cp "$bin" "$context/kandev-mock-agent"
# The agent's home: COPY keeps the mode of the directories under rootfs/.
mkdir -p "$context/rootfs/home/agent"
chmod 1777 "$context/rootfs/home/agent"

echo "==> docker build -t $image" >&2
docker build --pull=false -t "$image" "$context"
echo "==> built $image" >&2
