//go:build tools

// The binaries this module builds; scripts/k8s-binaries.sh runs
// `go build k8s.io/kubernetes/cmd/kube-apiserver` here.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
