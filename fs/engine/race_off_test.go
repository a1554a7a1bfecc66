//go:build !race

package engine

// raceDetector: see race_on_test.go.
const raceDetector = false
