# Turns the `RESULT key=value ...` lines of postback-bench into tab-separated rows: the
# value of -v label first (when given), then the values of the keys named in -v fields,
# in that order. -v run overrides the line's own `run` (a script's repeat number).
#
#   postback-bench burst | awk -v label=redis -v fields="scenario metric value" -f scripts/results-tsv.awk
/^RESULT / {
  split("", f)
  for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = substr($i, length(kv[1]) + 2) }
  if (run != "") f["run"] = run
  n = split(fields, names, " ")
  row = label
  for (i = 1; i <= n; i++) row = (i == 1 && label == "") ? f[names[i]] : row "\t" f[names[i]]
  print row
}
