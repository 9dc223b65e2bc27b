# 100 000 nested parentheses in an operand: one error at the 1001st level,
# no stack overflow, no crash.
awk 'BEGIN {
	print "# IR entry: @main"
	print "%para1_x: <Tensor[Float32], (2)>"
	print "subgraph @main() {"
	printf "  %%0(y) = ReLU(%%para1_x, "
	for (i = 0; i < 100000; i++)
		printf "("
	for (i = 0; i < 100000; i++)
		printf ")"
	print ")"
	print "  Return(%0)"
	print "}"
}'
