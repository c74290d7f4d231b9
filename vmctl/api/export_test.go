package api

import "slices"

// Codes returns the stable codes the error table answers, sorted, for the
// external tests (the OpenAPI document's Error.code enum).
func Codes() []string {
	var codes []string
	for _, m := range errorTable {
		codes = append(codes, m.code)
	}
	slices.Sort(codes)
	return slices.Compact(codes)
}
