package seccomp

// precompiledNative is this architecture's table (precompiled.go).
var precompiledNative = &precompiledAMD64
