#!/bin/bash
# Check every pcap in a directory with tshark (Wireshark 4.0 on Debian 12):
# total packets, RDMA packets (infiniband || iwarp_mpa), malformed packets, and a
# histogram of the RoCE BTH opcodes / CM MADs / iWARP RDMAP opcodes.
#
#   scripts/verify_captures.sh [DIR]          (default: <repo>/captures)
#   scripts/verify_captures.sh FILE.pcap...   (just these files)
#
# For files with iWARP, also the number of FPDUs whose MPA CRC32c tshark calls
# "Good CRC32" / "Bad CRC32" (FPDUs of a connection that did not negotiate CRC are
# not checked by tshark and are in neither count).
#
# rpcordma is disabled: its heuristic dissector otherwise claims some RDMA SEND
# payloads as RPC-over-RDMA and reports them as malformed.
set -u
if [ $# -gt 0 ] && [ -f "$1" ]; then
    FILES=("$@")
else
    DIR=${1:-$(cd "$(dirname "$0")/.." && pwd)/captures}
    FILES=("$DIR"/*.pcap)
fi
T="tshark --disable-protocol rpcordma"
RXE=()
for f in "${FILES[@]}"; do
    case $(basename "$f") in rxe_*.pcap) RXE+=("$f") ;; esac
    n=$(capinfos -c -M "$f" | awk '/Number of packets/ {print $NF}')
    rdma=$($T -r "$f" -Y 'infiniband || iwarp_mpa' 2>/dev/null | wc -l)
    bad=$($T -r "$f" 2>/dev/null | grep -c 'Malformed')
    printf '%-32s packets=%-5s rdma=%-5s malformed=%s\n' "$(basename "$f")" "$n" "$rdma" "$bad"
    # operations seen (Info column of RDMA packets, QP numbers stripped)
    $T -r "$f" -Y 'infiniband || iwarp_mpa' -T fields -e _ws.col.Info 2>/dev/null |
        sed -E 's/ ?QP=0x[0-9a-f]+ *//; s/^[0-9]+ > [0-9]+ //; s/ +$//' |
        sort | uniq -c | sort -rn | awk '{c=$1; $1=""; printf "      %4d %s\n", c, substr($0,2)}'
    case $(basename "$f") in
    siw_*|*iwarp*)
        v=$($T -r "$f" -V -O iwarp_mpa 2>/dev/null)
        printf '      mpa_crc: good=%s bad=%s\n' \
            "$(grep -c 'CRC check:.*(Good CRC32)' <<<"$v")" "$(grep -c 'CRC check:.*(Bad CRC32)' <<<"$v")" ;;
    esac
done
# RoCEv2 ICRC recomputation for the real rxe captures (standard library only)
[ ${#RXE[@]} -eq 0 ] || python3 "$(dirname "$0")/check_icrc.py" "${RXE[@]}"
exit 0
