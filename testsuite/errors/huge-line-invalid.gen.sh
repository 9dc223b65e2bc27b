# The same 5 MB node line with an empty element near its end: the error is
# located at column ~5 000 000 and the source line is shown as a window
# around the caret, not 5 MB of text.
awk 'BEGIN {
	print "# IR entry: @main"
	print "subgraph @main() {"
	printf "  %%0(t) = MakeTuple("
	for (i = 0; i < 400000; i++)
		printf "%sI64(%d)", (i == 399990 ? ", , " : i ? ", " : ""), i
	print ") {instance name: make_tuple}"
	print "  Return(%0)"
	print "}"
}'
