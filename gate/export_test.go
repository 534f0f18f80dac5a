package gate

// GenSlot exposes genSlot to the package's external tests.
var GenSlot = genSlot
