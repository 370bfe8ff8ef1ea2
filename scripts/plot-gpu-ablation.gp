# What each optimization buys (issue 8, item 5), from engine_bench's JSON (scripts/gpu-perf.sh
# writes it as engine_bench.json; committed under results/gpu/):
#   gnuplot -c scripts/plot-gpu-ablation.gp results/gpu/engine-bench-DATE.json results/gpu/ablation.png
# Left: llama2-7b decode step time at batch 1, 32 and 128 (context 512) in the default mode
# (fusion on, CUDA graphs on, batch-invariant off) and with each of them flipped. Right: a
# 4096-token prefill whole and in 512-token chunks (chunked prefill). Reads the pretty-printed
# JSON (one key per line) with awk, so nothing beyond gnuplot and awk is needed.
if (ARGC < 1) { print "usage: gnuplot -c scripts/plot-gpu-ablation.gp ENGINE_BENCH.json [OUT.png]"; exit }
json = ARG1
out = ARGC >= 2 ? ARG2 : "ablation.png"

# Each object's fields, emitted at its closing brace (nlohmann writes keys in sorted order).
fields = '/"name":/ {n=$0; sub(/.*"name": "/,"",n); sub(/".*/,"",n)} ' . \
         '/"shape":/ {s=$0; sub(/.*"shape": "/,"",s); sub(/",?[ \t]*$/,"",s)} ' . \
         '/"value":/ {v=$0; sub(/.*"value": /,"",v); sub(/,?[ \t]*$/,"",v)} ' . \
         '/"device":/ {d=$0; sub(/.*"device": "/,"",d); sub(/".*/,"",d)} '
# Decode: rows = batch, columns = modes, in the order the bench wrote them; "NaN" where skipped.
decode = fields . '/^  }/ { if (n == "ablation_decode") { split(s, a, " "); b = a[1]; m = a[3]; ' . \
         'if (!(b in seen_b)) { seen_b[b] = 1; bs[++nb] = b } if (!(m in seen_m)) { seen_m[m] = 1; ms[++nm] = m } ' . \
         'val[b, m] = (v == "null" ? "NaN" : v) } } ' . \
         'END { printf "batch"; for (j = 1; j <= nm; j++) printf " %s", ms[j]; print ""; ' . \
         'for (i = 1; i <= nb; i++) { printf "%s", bs[i]; ' . \
         'for (j = 1; j <= nm; j++) printf " %s", ((bs[i], ms[j]) in val ? val[bs[i], ms[j]] : "NaN"); print "" } }'
prefill = fields . '/^  }/ { if (n == "ablation_prefill" && v != "null") ' . \
          'print (s ~ /chunks/ ? "\"512-token chunks\"" : "whole"), v }'
device = fields . '/^  }/ { if (d != "") { print d; exit } }'

set print $decode
print system("awk '" . decode . "' " . json)
set print $prefill
print system("awk '" . prefill . "' " . json)
unset print
gpu = system("awk '" . device . "' " . json)
n_modes = words(system("awk '" . decode . "' " . json . " | head -1")) - 1
if (n_modes < 1) { print json . ": no ablation_decode entries"; exit }

set terminal pngcairo noenhanced size 1100,460 font "sans,10"
set output out
set multiplot layout 1,2 title "llama2-7b bf16 on " . gpu . ": what each optimization buys (engine_bench)"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set grid ytics
set key top left
set ylabel "decode step (ms)"
set xlabel "batch (context 512)"
set yrange [0:*]
plot for [c = 2:n_modes + 1] $decode using c:xtic(1) title columnhead(c)
set ylabel "prefill of 4096 tokens (ms)"
set xlabel ""
set style histogram rowstacked
set boxwidth 0.5
unset key
plot $prefill using 2:xtic(1) lc rgb "#4c72b0"
unset multiplot
print "wrote " . out
