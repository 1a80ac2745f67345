package nemesis

var builtBin string
