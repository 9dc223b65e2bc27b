# 100 000 nested brackets inside a bracketed value (UMonad[[[...): the raw
# scanner has the same 1000-level limit; the caret is at the 1001st level.
awk 'BEGIN {
	print "# IR entry: @main"
	print "%para1_x: <Tensor[Float32], (2)>"
	print "subgraph @main() {"
	printf "  %%0(y) = Load(%%para1_x, UMonad"
	for (i = 0; i < 100000; i++)
		printf "["
	for (i = 0; i < 100000; i++)
		printf "]"
	print ")"
	print "  Return(%0)"
	print "}"
}'
