package store

type txState struct{}
type storeState struct{}
