# 100 000 nested type constructors on a type line (Tuple[Tuple[...]]).
awk 'BEGIN {
	print "# IR entry: @main"
	print "%para1_x: <Tensor[Float32], (2)>"
	print "subgraph @main() {"
	print "  %0(y) = ReLU(%para1_x)"
	printf "      : (<Tensor[Float32], (2)>) -> (<"
	for (i = 0; i < 100000; i++)
		printf "Tuple["
	printf "Int64"
	for (i = 0; i < 100000; i++)
		printf "]"
	print ">)"
	print "  Return(%0)"
	print "}"
}'
