//go:build race

package engine

// raceDetector: the tests run under the race detector (modelOps).
const raceDetector = true
