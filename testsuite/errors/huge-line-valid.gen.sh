# A 5 MB node line (MakeTuple of 400 000 literals) that is valid: it parses,
# verifies and prints with exit status 0 and nothing on stderr.
awk 'BEGIN {
	print "# IR entry: @main"
	print "subgraph @main() {"
	printf "  %%0(t) = MakeTuple("
	for (i = 0; i < 400000; i++)
		printf "%sI64(%d)", (i ? ", " : ""), i
	print ") {instance name: make_tuple}"
	print "  Return(%0)"
	print "}"
}'
