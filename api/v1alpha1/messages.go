package v1alpha1

// StaleEpochMessage starts the message of the CRD's own rules on spec.epoch and spec.raisedEpoch: the
// refusal a write below the stored epoch, or a write of data below the epoch a declaration was raised to,
// gets from the apiserver itself, webhook or not ("stale epoch 4: this FencedResource has already admitted
// epoch 5"). fencing.ReasonOf recognises that refusal by it. A marker
// cannot name a Go constant, so pkg/fencing's tests check that the generated CRD's message starts with it
// and that the apiserver's refusal is read as a stale epoch.
const StaleEpochMessage = "stale epoch"
