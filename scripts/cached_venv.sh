# Sourced by the setup scripts. Virtual environments and compiler caches
# live outside the clone, under $HETERODL_CACHE (default ~/.cache/heterodl),
# so that a fresh clone on a machine that built before (CI's) neither
# downloads torch again nor recompiles what did not change; a bare machine
# builds them once.
#
#   source scripts/cached_venv.sh
#   link_venv .venv "torch==2.11.0" "torchvision==0.26.0"   # .venv -> the cache
#   link_cached_dir .venv-wheel "torch==2.6.0" jax           # a folder of venvs
#   use_ccache                                               # for CMake's builds

HETERODL_CACHE=${HETERODL_CACHE:-$HOME/.cache/heterodl}

# link_cached_dir PATH KEY...: makes PATH (relative to the clone) a
# symbolic link to a cached folder named after PATH and a hash of KEY...
# (what it will hold), creating the folder when it is missing; prints the
# folder. A real directory at PATH (a clone set up before venvs were
# cached) is left as it is, and printed.
link_cached_dir() {
  local path=$1
  shift
  if [[ -d $path && ! -L $path ]]; then
    echo "$path"
    return 0
  fi
  local key
  key=$(printf '%s\n' "$(python3 --version 2>&1)" "$@" | sha256sum | cut -c1-16)
  local target="$HETERODL_CACHE/venvs/${path#.}-$key"
  mkdir -p "$target"
  ln -sfn "$target" "$path"
  echo "$target"
}

# link_venv PATH KEY...: link_cached_dir, then a venv there when it has none.
link_venv() {
  local target
  target=$(link_cached_dir "$@")
  if [[ ! -x $target/bin/python ]]; then
    python3 -m venv "$target"
  fi
}

# use_ccache: CMake configured from now on compiles through ccache, its
# cache under $HETERODL_CACHE, paths taken relative to the clone (so clones
# in other folders hit it too).
use_ccache() {
  command -v ccache >/dev/null || return 0
  export CCACHE_DIR=${CCACHE_DIR:-$HETERODL_CACHE/ccache}
  export CCACHE_BASEDIR=$PWD
  export CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-16G}
  export CMAKE_C_COMPILER_LAUNCHER=ccache
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
}
