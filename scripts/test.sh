#!/usr/bin/env bash
# The README's test command: set everything up, then run the linters and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# each step says when it began (UTC), so a CI log shows where the time went
step() { echo "== $* ($(date -u +%T))"; }
# tshark is the decoding oracle; chromium + chromedriver render the book in a real browser;
# python3-pyverbs ships rdma-core's pyverbs test suite, the API oracle (docs/pyverbs.md).
# The live tests (tests/live) boot a virtme-ng VM with the distribution's kernel and run kernel
# rxe, rdma-core's and perftest's programs and pyverbs in it: qemu-system-x86 ... iproute2 below;
# procps (sysctl) and kmod (modprobe) are what the guest agent runs, named so a slim image has them too.
# linux-source-6.1 linux-headers-amd64 gcc make: Debian's kernel has no siw, so rdmalab.live.siw builds it
# (and the MPA-CRC variant that `rdmalab capture` uses for siw_crc_*) as an external module.
# bubblewrap: `rdmalab grade` runs each submission in a sandbox of its own (rdmalab.lab.sandbox).
# ibsim-utils, opensm, infiniband-diags: the stock InfiniBand subnet tools that `rdmalab ibsim` is compared with (issue 39).
# tzdata: decode -t a/ad (local time) is compared with tshark's in a time zone other than UTC; a slim image has no zones.
step "set-up: apt and pip"
RDMALAB_APT="${RDMALAB_APT:-tshark tzdata chromium chromium-driver fonts-dejavu-core python3-pyverbs qemu-system-x86 linux-image-amd64 busybox-static file rdma-core ibverbs-utils ibverbs-providers rdmacm-utils perftest tcpdump iproute2 procps kmod linux-source-6.1 linux-headers-amd64 gcc make bubblewrap ibsim-utils opensm infiniband-diags}" bash scripts/setup.sh "test,lab,wireshark,book,analysis,live"
# opensm and some diags live in /usr/sbin, which a non-login shell may not have on its PATH
export PATH="$PWD/.venv/bin:$PATH:/usr/sbin:/sbin"
# Locally a missing oracle makes its tests skip with a reason; in CI it must be there, so that
# no Wireshark cross-check or browser check is skipped and counted as passing.
if [ "${CI:-}" = true ]; then
  for tool in tshark mergecap chromium chromedriver bwrap tcpdump ibsim ibsim-run opensm ibnetdiscover ibroute smpquery perfquery saquery sminfo; do
    command -v "$tool" >/dev/null || { echo "CI: $tool is not installed; the checks that need it would be skipped" >&2; exit 1; }
  done
  # the live tests must run, not skip: say here what the VM would lack (rdmalab.live.vm.missing)
  python -c 'import sys; from rdmalab.live.vm import missing; m = missing(); [print("CI: live tests cannot run:", g, file=sys.stderr) for g in m]; sys.exit(1 if m else 0)'
fi
# tests/live boot one VM for the session (30-60 s under TCG, ~2-3 min for all live tests); the
# notebooks run on rxe (tests/live/test_notebook*_rxe.py) attach to it: ~3-5 min more under TCG
export RDMALAB_LIVE="${RDMALAB_LIVE:-1}"
step ruff; ruff check rdmalab tests benchmarks examples
step "mypy (strict on rdmalab.wire)"; mypy rdmalab
# What runs after the tests: rdma-core's pyverbs suite on rdmalab.verbs (twice), the wheel, the two books.
# In a subshell with -e: the first failing step ends it, with its code.
after_tests() (
  set -e
  # python3-pyverbs provides only the test files here (no kernel device): the suite runs on rdmalab.verbs.
  step "rdma-core's pyverbs tests on rdmalab.verbs, side by side with kernel rxe"
  python scripts/run_pyverbs_suite.py --check
  step "the same suite with soft0 given a net interface (rdma-cm tests included), side by side with rxe's"
  bash scripts/pyverbs_in_netns.sh --check --rxe tests/pyverbs/rxe-6.1-netif-results.json --exceptions tests/pyverbs/exceptions-netif.json
  step "the wheel: pip install rdmalab in a fresh venv, then rdmalab lab and rdmalab decode from it"
  bash scripts/check_wheel.sh "$PWD/.venv/bin/python"
  step "the book: built offline from the notebooks, links checked, rendered in headless Chromium"
  bash scripts/build_book.sh
  step "the instructor edition of the book (solutions folded; every check must pass)"
  bash scripts/build_book.sh --instructor --no-browser
)
step "pytest"
set +e
after_rc=
if [ "$RDMALAB_LIVE" = 1 ] && [ $# = 0 ]; then
  # The whole suite, in two pytest processes side by side: the tests outside tests/live use about one
  # core of the two (one process), and tests/live mostly waits on its TCG VM, which uses about one core,
  # one VM at a time (the interop matrix's first: tests/live/conftest.py runs it before the others when the
  # session holds only live tests). One after the other they took 58 minutes here; side by side 29.
  # The steps after the tests start when the others are done, while tests/live finishes (it ran about two
  # minutes longer, the steps take about three: 38 minutes in all here, 36.5 so). The live tests' report
  # follows theirs. (Arguments given: one process runs what they ask for, then the steps.)
  live_log=$(mktemp "${TMPDIR:-/tmp}/rdmalab-live-tests.XXXXXX")
  python -m pytest tests/live -p no:cacheprovider > "$live_log" 2>&1 &
  live_pid=$!
  python -m pytest --ignore=tests/live -p no:cacheprovider
  rc=$?
  if [ "$rc" = 0 ]; then
    step "the steps after the tests, while tests/live finishes"
    after_tests
    after_rc=$?
  fi
  wait "$live_pid"
  live_rc=$?
  step "pytest tests/live (run beside the tests above)"
  cat "$live_log"
  rm -f "$live_log"
  if [ "$live_rc" = 5 ]; then echo "pytest collected no live tests" >&2; live_rc=1; fi
  if [ "$rc" = 0 ]; then rc=$live_rc; fi  # (the first failure's code: the other tests' if they failed)
else
  python -m pytest "$@"
  rc=$?
fi
set -e
# pytest exits 5 when it collected no tests: that is a failure of this suite, say so plainly.
if [ "$rc" = 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi
if [ "$rc" != 0 ]; then exit "$rc"; fi
if [ -z "$after_rc" ]; then
  after_tests
else
  exit "$after_rc"
fi
