package main

import (
	"fmt"
	"strings"
)

// parseLabels turns repeated "--label KEY=VALUE" into a map. An entry
// without "=", with an empty key or a key given twice is an error; the
// daemon checks the key's syntax and the value's length.
func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	labels := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want KEY=VALUE", kv)
		}
		if _, dup := labels[k]; dup {
			return nil, fmt.Errorf("--label %q: key %q given twice", kv, k)
		}
		labels[k] = v
	}
	return labels, nil
}
