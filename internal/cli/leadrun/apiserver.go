package leadrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	authenticationv1api "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// PermanentAttempts is how many times in a row one kind of request ("create Lease"), while not leading,
// must fail with a permanent error (IsPermanent) before Run and Sidecar.Run give up: a few retry periods, so that a RoleBinding applied
// together with the pod has a moment to take effect, and never an endless retry.
const PermanentAttempts = 3

// PermanentError is what Run and Sidecar.Run return when the apiserver answered one kind of request
// PermanentAttempts times in a row with a permanent error: the elector cannot work until someone changes
// the cluster.
type PermanentError struct {
	// Lease is "namespace/name".
	Lease string
	// Op is the last refused request ("create Lease", "list Leases", "create SelfSubjectReview").
	Op string
	// Why is what is wrong, in a few words; Err is the apiserver's answer.
	Why string
	Err error
}

func (e *PermanentError) Error() string {
	return fmt.Sprintf("cannot elect on Lease %s: %s: %s refused %d times in a row: %v", e.Lease, e.Why, e.Op, PermanentAttempts, e.Err)
}

func (e *PermanentError) Unwrap() error { return e.Err }

// ErrNotAcquired is the cause Run and Sidecar.Run return when the Lease was not acquired within the
// acquisition timeout.
var ErrNotAcquired = errors.New("the Lease was not acquired in time")

// IsPermanent reports whether err is an answer of the apiserver that retrying cannot change, and what it
// means: a namespace that does not exist (NotFound naming a namespace, which creating a Lease there
// answers; a missing Lease is normal), Forbidden (RBAC, or a policy that refuses this elector),
// Unauthorized (the credentials) and Invalid.
func IsPermanent(err error) (string, bool) {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return "", false
	case apierrors.IsNotFound(err):
		if errors.As(err, &status) && status.Status().Details != nil && status.Status().Details.Kind == "namespaces" {
			return "the namespace does not exist", true
		}
		return "", false
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "denied request"):
		return "refused by admission (fencekit's Lease policy or a webhook)", true
	case apierrors.IsForbidden(err):
		return "forbidden (is the fencekit-elector ClusterRole bound to this ServiceAccount?)", true
	case apierrors.IsUnauthorized(err):
		return "the apiserver does not accept these credentials", true
	case apierrors.IsInvalid(err):
		return "the apiserver finds the request invalid", true
	}
	return "", false
}

// apiState follows the answers to the elector's requests: whether the apiserver answers (the sidecar's
// readiness), and how many permanent errors each kind of request met in a row while not leading (the
// elector interleaves kinds: it lists Leases, which succeeds, before each create, which a missing
// namespace refuses).
type apiState struct {
	lease  string
	giveUp func(error) // called once, with a *PermanentError

	mu       sync.Mutex
	answered bool // the last request got an answer that is part of a working election
	leading  bool
	led      bool           // led at least once
	inARow   map[string]int // by op
	gaveUp   bool
}

func (s *apiState) record(op string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	why, permanent := IsPermanent(err)
	s.answered = err == nil || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) && !permanent
	if s.inARow == nil {
		s.inARow = map[string]int{}
	}
	if !permanent || s.leading {
		delete(s.inARow, op)
		return
	}
	s.inARow[op]++
	if s.inARow[op] >= PermanentAttempts && !s.gaveUp && s.giveUp != nil {
		s.gaveUp = true
		s.giveUp(&PermanentError{Lease: s.lease, Op: op, Why: why, Err: err})
	}
}

func (s *apiState) setLeading(leading bool) {
	s.mu.Lock()
	s.leading, s.inARow = leading, nil
	s.led = s.led || leading
	s.mu.Unlock()
}

func (s *apiState) everLed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.led
}

func (s *apiState) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered
}

// observe returns cs with its Lease and SelfSubjectReview requests (all the elector sends, besides Events)
// recorded in s.
func (s *apiState) observe(cs kubernetes.Interface) kubernetes.Interface {
	return observedClient{Interface: cs, s: s}
}

type observedClient struct {
	kubernetes.Interface
	s *apiState
}

func (c observedClient) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return observedCoordination{CoordinationV1Interface: c.Interface.CoordinationV1(), s: c.s}
}

func (c observedClient) AuthenticationV1() authenticationv1.AuthenticationV1Interface {
	return observedAuthentication{AuthenticationV1Interface: c.Interface.AuthenticationV1(), s: c.s}
}

type observedCoordination struct {
	coordinationv1client.CoordinationV1Interface
	s *apiState
}

func (c observedCoordination) Leases(namespace string) coordinationv1client.LeaseInterface {
	return observedLeases{LeaseInterface: c.CoordinationV1Interface.Leases(namespace), s: c.s}
}

type observedLeases struct {
	coordinationv1client.LeaseInterface
	s *apiState
}

func (l observedLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	res, err := l.LeaseInterface.Get(ctx, name, opts)
	l.s.record("get Lease", err)
	return res, err
}

func (l observedLeases) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	res, err := l.LeaseInterface.List(ctx, opts)
	l.s.record("list Leases", err)
	return res, err
}

func (l observedLeases) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	res, err := l.LeaseInterface.Watch(ctx, opts)
	l.s.record("watch Leases", err)
	return res, err
}

func (l observedLeases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	res, err := l.LeaseInterface.Create(ctx, lease, opts)
	l.s.record("create Lease", err)
	return res, err
}

func (l observedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	res, err := l.LeaseInterface.Update(ctx, lease, opts)
	l.s.record("update Lease", err)
	return res, err
}

type observedAuthentication struct {
	authenticationv1.AuthenticationV1Interface
	s *apiState
}

func (a observedAuthentication) SelfSubjectReviews() authenticationv1.SelfSubjectReviewInterface {
	return observedSelfSubjectReviews{SelfSubjectReviewInterface: a.AuthenticationV1Interface.SelfSubjectReviews(), s: a.s}
}

type observedSelfSubjectReviews struct {
	authenticationv1.SelfSubjectReviewInterface
	s *apiState
}

func (r observedSelfSubjectReviews) Create(ctx context.Context, ssr *authenticationv1api.SelfSubjectReview, opts metav1.CreateOptions) (*authenticationv1api.SelfSubjectReview, error) {
	res, err := r.SelfSubjectReviewInterface.Create(ctx, ssr, opts)
	r.s.record("create SelfSubjectReview", err)
	return res, err
}
