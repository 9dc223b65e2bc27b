#!/bin/sh
# mkman.sh TEMPLATE PASSES_DEF - fills @PASSES@ in the man page template with
# one entry per PASS(name, fn, default, per_rank, "help") line of passes.def, so that
# the man page, --help and the pass manager share one list.
awk -v def="$2" '
function passes(   line, name, dflt, help) {
	while ((getline line < def) > 0) {
		if (line !~ /^PASS\(/) continue
		sub(/^PASS\(/, "", line)
		name = line; sub(/,.*/, "", name)
		dflt = line; sub(/^[^,]*,[^,]*, */, "", dflt); sub(/,.*/, "", dflt)
		help = line; sub(/^[^"]*"/, "", help); sub(/"\)[^"]*$/, "", help)
		gsub(/\\/, "\\e", help)
		printf ".It Cm %s\n%s%s\n", name, help, (dflt == "1" ? " (default)" : "")
	}
}
/^@PASSES@$/ { passes(); next }
{ print }' "$1"
