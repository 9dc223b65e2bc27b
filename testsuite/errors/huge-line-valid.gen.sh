# A 5 MB node line (MakeTuple of 400 000 literals) and its 7 MB type line,
# both valid: they parse, verify and print with exit status 0 and nothing on
# stderr.
awk 'BEGIN {
	print "# IR entry: @main"
	print "subgraph @main() {"
	printf "  %%0(t) = MakeTuple("
	for (i = 0; i < 400000; i++)
		printf "%sI64(%d)", (i ? ", " : ""), i
	print ") {instance name: make_tuple}"
	printf "      : ("
	for (i = 0; i < 400000; i++)
		printf "%s<Int64, NoShape>", (i ? ", " : "")
	print ") -> (<Tuple[Int64*400000]>)"
	print "  Return(%0)"
	print "      : (<Tuple[Int64*400000]>)"
	print "}"
}'
