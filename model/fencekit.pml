/*
 * fencekit.pml: fencekit's protocol (docs/design/, the admission core of internal/operator/admission) as a
 * Promela model, checked exhaustively by spin. docs/model.md states the properties, maps each action
 * to the Go function or CEL rule it stands for, and lists the mutations (-D flags) the model must refute.
 *
 * Actors (each a process; a pause is a process that is not scheduled, at any step):
 *   Elector(h)  h = 0..NH-1: acquires (compare-and-swap on the Lease), fences on acquire (lists the
 *               covered objects, raises each), hands the token to its worker, renews, releases.
 *   Worker(h)   holder h's code: writes the objects with the last token it was handed, forever (a
 *               stale holder is a worker whose token is no longer the Lease's).
 *   Others      actors without the token: free writes (finalizers), records seeded on uncovered objects,
 *               creates and deletes of uncovered objects, deletes once the Lease has no live holder,
 *               Lease metadata writes (another elector-role user), one Lease delete (a user who may),
 *               one widening of the policy (a namespace admin); with HEADROOM free writes that grow a
 *               covered object, with ACQ declarations bound to the Lease, with ALIAS a Pod's binding
 *               through either route.
 *   Copy        the webhook's watch-fed copy of the Lease catches up with the Lease (lags arbitrarily,
 *               never goes back).
 * Every write to an object runs as the apiserver runs it: read the stored object, admission (the
 * webhook's Lease read, copy or quorum) against it, commit by compare-and-swap, retry on a lost swap.
 */

#ifndef NH
#define NH 3          /* electors (replicas), each with its worker */
#endif
#define NO 2          /* objects */
#ifndef MAXE
#define MAXE 3        /* highest epoch an acquisition may issue: bounds the run */
#endif

/* Configuration B (-DCONFIG_B): the last elector fences nothing and declares nothing. The Lease
 * deleter is left out unless RESIDUAL_RECREATE (a documented residual: stop the electors first). */
#ifdef CONFIG_B
#define FENCES(h) ((h) != NH-1)
#ifdef RESIDUAL_RECREATE
#define LEASE_DELETER 1
#else
#define LEASE_DELETER 0
#endif
#else
#define FENCES(h) 1
#ifdef NO_LEASE_DELETER
#define LEASE_DELETER 0
#else
#define LEASE_DELETER 1
#endif
#endif

#ifdef DELETES
#define DELETER 1     /* holders and tokenless actors delete objects */
#else
#define DELETER 0
#endif
/* Finalizers (free writes) only matter between a holder's marker write and its DELETE: elsewhere a
 * swap they make fail is retried, as if the request had been read later. */
#ifdef NO_DELETE_RETRY
#define FINALIZERS 1
#else
#define FINALIZERS 0
#endif
#if defined(NO_SEEDS) || defined(ACQ)
#define SEEDS 0
#else
#define SEEDS 1       /* tokenless actors write records on uncovered objects, create them (else: both exist at the start) */
#endif
#ifdef WIDEN
#define WIDENER 1     /* a namespace admin may widen the policy once */
#else
#define WIDENER 0
#endif

/* HEADROOM: object sizes in small units. Tokenless actors may grow a covered object only up to HR_B
 * (the whole object, managedFields included: a tokenless write is refused if its result is larger than
 * the stored object and larger than HR_B); the holder's part of an object is at most HR_H; the
 * apiserver refuses an object larger than HR_L, and HR_L > HR_B + HR_H. Sizes are those of o0 (o1 stays
 * small); the copy plays no part in them (NO_COPY: every decision on a quorum read). */
#ifdef HEADROOM
#define HR_L 5
#define HR_B 2
#define HR_H 2
#ifdef MUT_ENTRY_PAD                 /* (h) the per-entry bound: an entry that also owns a non-free field grows without limit */
#define PAD_LIMIT HR_L
#else
#define PAD_LIMIT HR_B
#endif
#define SIZE(k) (o_pad[k] + (o_dat[k] -> HR_H : 0))
#define ND_DECL bool nd;
#define ND_SEL ; if :: o == 0 -> SEL(nd) :: else -> skip fi
#define ND_RESET ; nd = 0
#else
#define ND_DECL
#define ND_SEL
#define ND_RESET
#endif

/* ACQ: fence-on-acquire raises every object a holder wrote (one with a record when it listed: a holder's
 * write or an earlier raise gave it one; spec.epoch != 0), with no budget: only a raise that fails (a
 * timeout) fails the acquisition. Then it raises at most R_BUDGET of the others (the declarations, no
 * record), in any order; those left are unraised (reported), and the holder's first write to each raises
 * it. Tokenless actors create up to MAXDECL declarations: o1 and MAXDECL - 1 that no holder writes (a
 * count: raising one changes nothing any property reads). */
#ifdef ACQ
#define R_BUDGET 1
#ifndef MAXDECL                      /* fewer for a shorter breadth-first search (k, residual-unraised-copy) */
#define MAXDECL 3
#endif
#if defined(MUT_RAISE_ALL) || defined(MUT_BUDGET_HOLDER)
#define HW_BUDGETED 1                /* (i), (k): the objects a holder wrote count against the budget too */
#else
#define HW_BUDGETED 0
#endif
#ifdef STRICT_UNRAISED               /* P1 without its exceptions for objects the fence left unraised */
#define UNR_OR(k)
#define UNRAISED(bit) 0
#define UNRAISED_NHW(bit) 0
#elif defined(STRICT_UNRAISED_COPY)  /* P1 with its commit exception only: the copy admits nothing of the old term to an unraised object */
#define UNR_OR(k)
#define UNRAISED(bit) (listed & ~raised & (bit))
#define UNRAISED_NHW(bit) 0
#else
#define UNR_OR(k) || unr[k]
/* left unraised: in-flight writes of the old term, admitted before the acquisition, may land once */
#define UNRAISED(bit) (listed & ~raised & (bit))
/* left unraised and no holder had written it when the fence listed: the copy may admit the old term's
 * writes only to such an object (it decides a write only at the record the object holds) */
#define UNRAISED_NHW(bit) (listed & ~hw & ~raised & (bit))
#endif
#define UNR_CLEAR(k) ; unr[k] = 0
#define ACQ_DECL byte nr, raised, hw, pass, xlisted, xdone, nhwl, ko TL_DECL;
/* the listing also reads which listed objects a holder wrote (a record: FenceObjectsOnAcquire's
 * splitWritten on the same List) and how many more declarations there are. TWO_LISTS (not a check: an
 * open finding, docs/model.md): FenceOnAcquire's two Lists, the written FencedResources (spec.epoch!=0)
 * here, the declarations (spec.epoch=0) after their raises; cov1 is what the first List could see */
#ifdef TWO_LISTS
#define ACQ_LIST ; cov1 = listed; hw = listed & ((o_rec[0] != 0 -> 1 : 0) | (o_rec[1] != 0 -> 2 : 0)); listed = hw; \
  ACQ_LIST_REST
#define LIST_DECLARATIONS(h) \
  listed = listed | ((COV(0) && o_rec[0] == 0 -> 1 : 0) | (COV(1) && o_rec[1] == 0 -> 2 : 0)); \
  printf("elector %c's fence-on-acquire lists the declarations (no record): %e\n", 'A' + h, \
         ((listed & ~hw) == 3 -> o0_and_o1 : ((listed & ~hw) == 1 -> o0 : ((listed & ~hw) == 2 -> o1 : none))))
#define ELATE_NOT(bit) && !(cov1 & (bit))   /* not late: it was covered when the fence listed */
#define TL_DECL , cov1
#define TL_RESET ; cov1 = 0
#define PASS1(h) atomic { pass = 1; o = 0; LIST_DECLARATIONS(h) }
#else
#define TL_DECL
#define TL_RESET
#define PASS1(h) pass = 1; o = 0
#define ACQ_LIST ; hw = (o_rec[0] != 0 -> 1 : 0) | (o_rec[1] != 0 -> 2 : 0); ACQ_LIST_REST
#define ELATE_NOT(bit)
#endif
#define ACQ_LIST_REST xlisted = xdecl; \
  nhwl = (listed & hw & 1) + ((listed & hw & 2) >> 1); \
  if \
  :: xlisted > 0 -> printf("elector %c's fence-on-acquire also lists %d more declarations\n", 'A' + h, xlisted) \
  :: else -> skip \
  fi
#define ACQ_RESET ; nr = 0; raised = 0; hw = 0; pass = 0; xlisted = 0; xdone = 0; nhwl = 0; ko = 0 TL_RESET
#else
#define UNR_OR(k)
#define UNR_CLEAR(k)
#define ACQ_LIST
#define ELATE_NOT(bit)
#define ACQ_DECL
#define ACQ_RESET
#endif

/* ALIAS: the objects are Pods (o0 is bound, o1 only written); a binding reaches the apiserver through the subresource pods/binding or
 * through the alias resource bindings (its kind is the same). The webhook matches R and R/*, and the
 * alias of a declared resource; the handler decides an alias request as the subresource's. */
#define SUBR 1
#define ALIASR 2
#ifdef MUT_ALIAS_UNROUTED            /* (j) the webhook matches only R and R/*: the alias is not routed */
#define ALIAS_MATCHED 0
#else
#define ALIAS_MATCHED 1
#endif
#define ROUTED(r) ((r) == SUBR || ALIAS_MATCHED)

/* Mutations: each one's condition, as the design has it and as the mutation changes it. */
#ifdef MUT_COPY_LABEL_OUT            /* (a) the copy decides a write that labels the object out */
#define COPY_COVERED_AFTER 1
#else
#define COPY_COVERED_AFTER (nlab || wide)
#endif
#ifdef MUT_COPY_NO_DECLARATION       /* (b) the copy is used without the fence-on-acquire declaration */
#define COPY_DECLARED 1
#else
#define COPY_DECLARED c_fen
#endif
#ifdef MUT_COPY_NO_RECORD            /* (c) the copy admits without stored record == presented */
#define COPY_RECORD 1
#else
#define COPY_RECORD (o_rec[o] == t)
#endif
#ifdef MUT_COPY_IGNORES_COVERAGE     /* (g) the copy decides whatever the policy's coverage epoch */
#define COPY_COVERAGE 1
#else
#define COPY_COVERAGE (cov_rec && c_ep > cov_ep)
#endif
#ifdef MUT_TODAY_RECORD_RULE         /* (e) a stored record above the presented refuses */
#define RECORD_ABOVE_REFUSES 1
#else
#define RECORD_ABOVE_REFUSES 0
#endif

/* request kinds and results */
#define UPD 1         /* an update or patch of the object itself */
#define CRE 2         /* a create */
#define RAISE 3       /* fence-on-acquire's raise */
#define DONE 1
#define REFUSED 2
#define NOTFOUND 3
#define EXISTS 4
#define SKIPPED 5
#define FUTURE 6
#define CONFLICT 7
#define BIND 4        /* a Pod's binding (ALIAS) */

/* compare-and-swap: bit b of o_ver[o] is set while requester b's read of object o is current; every
 * commit clears them all (a Lease write is one atomic step: read and swap can merge, see Elector). Requesters: worker h = bit h, elector h's fence = bit NH+h, others = 2*NH. */
#define WBIT(h) (1 << (h))
#define FBIT(h) (1 << (NH + (h)))
#define XBIT (1 << (2*NH))

/* ---- the Lease ---- */
bool l_ex;            /* exists */
byte l_ep;            /* its epoch; kept when it is deleted, so that a create seeds above it */
byte l_hold;          /* holder: 0 none, h+1 */
bool l_fen;           /* declares fence-on-acquire for objects (annotation fencing.fencekit.io/fences) */
bool l_deleted;       /* the Lease deleter has acted (once) */
#define LIVE (l_ex && l_hold != 0)

/* ---- the webhook's copy of the Lease ---- */
bool c_ex; byte c_ep; bool c_held; bool c_fen;

/* ---- the objects (a FencingPolicy with one selector; wide: widened to every object) ---- */
bool o_ex[NO]; byte o_rec[NO]; bool o_lab[NO]; byte o_mark[NO]; byte o_ver[NO];
#ifdef NO_DELETE_RETRY
bool o_other[NO];     /* the last commit to the object was a tokenless actor's */
#define OTHER(k, x) o_other[k] = x
#else
#define OTHER(k, x) skip
#endif
bool wide;
/* the FencingPolicy's status.coverageEpoch for its current generation (cov_rec: recorded yet) */
bool cov_rec = 1; byte cov_ep;
#define COV(o) (o_ex[o] && (o_lab[o] || wide))

/* ---- tokens and the ghosts the properties read ---- */
byte tok[NH];         /* the token handed to holder h's code (0: none yet) */
byte handedF;         /* highest epoch handed out by an elector that fences on acquire */
byte handedAll;       /* highest epoch handed out by any elector */
bool owe[NO];         /* a write admitted on a copy that lagged the Lease committed, not yet written over by a raise */
bool ent[NO];         /* an in-flight create or label-in committed after the Lease moved past its epoch */
bool late[NO];        /* the object was not listed by the fence of epoch handedF and no write at >= handedF committed since */
bool elate[NO];       /* late by an entry (a create or label-in committed after the listing), not by the widening */
byte hiF[NO];         /* highest record a fenced write gave the object */
bool lockout;         /* a tokenless actor's record failed an acquisition (P3) */
#ifdef HEADROOM
byte o_pad[NO];       /* what tokenless actors added to the object (size units) */
bool o_dat[NO];       /* the holder's part of the object: 0 or HR_H */
#endif
#ifdef ACQ
byte xdecl;           /* declarations created beyond o1, which no holder writes */
bool unr[NO];         /* left unraised by the fence of epoch handedF, no record when it listed (no holder had
                         written it), no write at >= handedF committed since */
#endif
#ifdef ALIAS
bool o_bnd[NO];       /* the Pod is bound to a node (once: a binding of a bound Pod fails) */
#endif

#define SEL(x) if :: x = 0 :: x = 1 fi

/* words of the story a trail prints (underscores become spaces) */
mtype = { at, deleted_at, released_at, expired_at, exists, absent, labelled_in, labelled_out,
          with_deletion_marker, no_marker, declares_fence_on_acquire, declares_nothing_and_fences_nothing,
          o0_and_o1, o0, o1, none, held, without_a_live_holder, writes, creates, declaring_fence_on_acquire, declaring_nothing }

/* The webhook's decision for a write presenting t (internal/operator/admission Decide on the adapter's inputs):
 * the copy may admit an update of the object itself, covered before and after, at the stored record,
 * on a copy that shows the Lease at t, held, declaring fence-on-acquire; everything else, and every
 * refusal, on a quorum read. v: 0 admitted, 1 refused for the Lease (stale, released, expired, missing),
 * 2 refused for the object (what no actor without the token may cause for the holder). */
inline decide() {
  v = 0; tag = 0;
  gov = COV(o) || nlab || wide; dgov = gov;
  if
  :: !gov -> printf("    webhook: o%d is covered neither before nor after the write: no policy, admitted\n", o)
  :: else ->
     if
     :: kind == UPD && COV(o) && COPY_COVERED_AFTER && COPY_RECORD &&
        c_ex && c_ep == t && c_held && COPY_DECLARED && COPY_COVERAGE ->
        tag = !(l_ex && l_ep == t);
        printf("    webhook: its copy shows the Lease at epoch %d, held, %e (the Lease itself: %e epoch %d): admitted on the copy\n",
               c_ep, (c_fen -> declaring_fence_on_acquire : declaring_nothing), (l_ex -> at : deleted_at), l_ep);
        /* P1 (read): the copy never admits a write presenting t after a higher epoch was handed out,
         * except to an object that entered the coverage late by a create or label-in (the residual),
         * or one the fence of that epoch left unraised and no holder had written (no record) when it
         * listed, until a write at that epoch (ACQ) */
        assert(t >= handedAll || elate[o] UNR_OR(o))
     :: else ->
        if
        :: !l_ex || l_ep != t || l_hold == 0 ->
           v = 1;
           printf("    webhook: quorum read, the Lease is %e epoch %d: refused\n",
                  (!l_ex -> deleted_at : (l_hold == 0 -> released_at : at)), l_ep)
        :: else ->
           if
           :: RECORD_ABOVE_REFUSES && kind != RAISE && o_ex[o] && o_rec[o] > t ->
              v = 2; printf("    webhook: quorum read, Lease at %d, but o%d records %d, above %d: refused\n", l_ep, o, o_rec[o], t)
           :: else -> printf("    webhook: quorum read, the Lease is at epoch %d, held: admitted\n", l_ep)
           fi
        fi
     fi
  fi
}

/* One write of object o presenting t, as the apiserver runs it (registry Store.Update ->
 * GuaranteedUpdate): read the stored object and run admission against it (the webhook's Lease read
 * happens in that step: the object cannot change between the two without failing the swap below, so
 * one step loses no interleaving), then commit by compare-and-swap, or read again and retry. */
inline objwrite(me) {
  res = 0;
  do
  :: atomic {
       if
       :: kind == RAISE -> nlab = o_lab[o]; nmark = 0
#ifdef HEADROOM
          nd = o_dat[o]   /* a raise rewrites the record: the holder's part keeps its size */
#endif
       :: else -> skip
       fi;
       printf("    apiserver reads o%d as stored: %e, record %d, %e\n", o, (o_ex[o] -> exists : absent), o_rec[o],
              (o_lab[o] -> labelled_in : labelled_out));
       if
       :: kind == CRE && o_ex[o] -> res = EXISTS
       :: kind != CRE && !o_ex[o] -> res = NOTFOUND
#ifdef MUT_FENCE_SKIPS_EQUAL
       :: kind == RAISE && o_ex[o] && o_rec[o] == t -> res = SKIPPED;  /* (d) left alone: nothing commits */
          printf("    fence: o%d already records epoch %d: left alone, nothing is written\n", o, t)
#endif
       :: kind == RAISE && o_ex[o] && o_rec[o] > t && RECORD_ABOVE_REFUSES -> res = FUTURE
       :: else ->
          decide();
          if :: v != 0 -> res = REFUSED :: else -> o_ver[o] = o_ver[o] | me fi
       fi
     }
     if
     :: res != 0 -> break
     :: else -> skip
     fi;
     atomic {
       if
       :: o_ver[o] & me ->
#ifdef HEADROOM
          /* P4: the holder's write (of any kind) never fails for size because of what tokenless actors added */
          if
          :: o_pad[o] + (nd -> HR_H : 0) > HR_L ->
             printf("    apiserver: o%d would be %d, above the limit %d: the write fails\n", o, o_pad[o] + (nd -> HR_H : 0), HR_L);
             assert(o_pad[o] + (nd -> HR_H : 0) <= HR_L);
             o_ver[o] = o_ver[o] & ~me; res = REFUSED; break
          :: else -> skip
          fi;
          o_dat[o] = nd;
#endif
          printf("    apiserver commits o%d: record %d, %e, %e\n", o, t, (nlab -> labelled_in : labelled_out),
                 (nmark != 0 -> with_deletion_marker : no_marker));
#ifdef HEADROOM
          printf("    o%d's size is %d now (the holder's part: %d)\n", o, SIZE(o), (nd -> HR_H : 0));
#endif
          gov = COV(o) || nlab || wide;
          entering = !COV(o) && (nlab || wide);
          if
          :: gov && !dgov ->   /* decided uncovered, committed after the policy was widened: the residual */
#ifdef STRICT_ENTRY
             assert(dgov);
#endif
             late[o] = 1; ent[o] = 1; gov = 0
          :: else -> skip
          fi;
          /* P1 (commit): no write presenting t commits to a covered object after an epoch above t
           * was handed to an elector that fences on acquire, except to an object that entered the
           * coverage without being listed by that fence (the documented residual, late[o]) */
          if
          :: gov && t < handedF ->
             if
             :: entering ->
                ent[o] = 1;
#ifdef STRICT_ENTRY
                assert(t >= handedF);
#endif
                late[o] = 1; elate[o] = 1
             :: else -> assert(late[o])
             fi
          :: else -> skip
          fi;
          /* P2: a record written by a fenced write never goes down (except on an object of the residual) */
          if
          :: gov -> assert(t >= hiF[o] || late[o]); if :: t > hiF[o] -> hiF[o] = t :: else -> skip fi
          :: else -> skip
          fi;
          if :: entering && !(l_ex && l_ep == t) -> ent[o] = 1 :: else -> skip fi;
          if :: tag -> owe[o] = 1 :: else -> skip fi;
          if :: kind == RAISE -> owe[o] = 0 :: else -> skip fi;
          if :: t >= handedF && !entering -> late[o] = 0; elate[o] = 0 UNR_CLEAR(o) :: else -> skip fi;
          o_ex[o] = 1; o_rec[o] = t; o_lab[o] = nlab; o_mark[o] = nmark; OTHER(o, 0);
          if :: nmark != 0 -> o_ver[o] = me :: else -> o_ver[o] = 0 fi;
          res = DONE; break
       :: else -> printf("    apiserver: o%d changed since it was read: the compare-and-swap fails, retry\n", o)
       fi
     }
  od;
  atomic { gov = 0; dgov = 0; tag = 0; entering = 0 }
}

#ifdef ALIAS
/* A binding of Pod o presenting t through route (pods/binding or bindings), as the apiserver runs it
 * (BindingREST.Create): admission once, then the Pod's GuaranteedUpdate sets its node, failing if the Pod
 * is bound already; admission does not run again on a retry of the swap. Through bindings the webhook
 * is called only if it matches the alias; its handler decides the request as pods/binding's: a binding
 * carries no record, it is decided on the token alone, on a quorum read. */
inline bindwrite() {
  atomic {
    nlab = o_lab[o]; res = 0; v = 0;
    if
    :: route = SUBR; printf("    the binding goes through pods/binding\n")
    :: route = ALIASR; printf("    the binding goes through bindings\n")
    fi;
    if
    :: !o_ex[o] -> res = NOTFOUND
    :: o_ex[o] && !ROUTED(route) ->
       printf("    apiserver: no webhook rule matches bindings: admitted without a decision\n")
    :: o_ex[o] && ROUTED(route) ->
       if
       :: route == ALIASR -> printf("    webhook: bindings, kind Binding: decided as pods/binding\n")
       :: else -> skip
       fi;
       decide();
       if :: v != 0 -> res = REFUSED :: else -> skip fi
    fi;
    bcov = COV(o);
    /* P6: a binding of a covered Pod is admitted only for the holder: the Lease at the presented epoch, held */
    assert(res != 0 || !bcov || (l_ex && l_ep == t && l_hold != 0));
    bcov = 0; gov = 0; dgov = 0; route = 0
  }
  if
  :: res == 0 ->
     atomic {
       if
       :: o_ex[o] && !o_bnd[o] ->
          printf("    apiserver binds o%d (its node set, the record %d left as stored)\n", o, o_rec[o]);
          if
          :: COV(o) && t < handedF && !late[o] ->
             printf("    (a binding presenting %d committed after token %d was handed out: the raise does not order it)\n", t, handedF);
#ifdef STRICT_BIND
             assert(late[o]);
#endif
             skip
          :: else -> skip
          fi;
          o_bnd[o] = 1; o_ver[o] = 0; res = DONE
       :: else -> res = CONFLICT;
          printf("    apiserver: o%d is bound already or gone: the binding fails\n", o)
       fi
     }
  :: else -> skip
  fi
}
#endif

/* Elector h's raise of object o to epoch t (fence-on-acquire): fails (a timeout), or a write through
 * the apiserver; ok = 0 if the acquisition fails. */
inline raiseobj(h) {
  if
  :: printf("elector %c's raise of o%d fails (a timeout): the acquisition fails\n", 'A' + h, o); ok = 0
  :: printf("elector %c raises o%d to epoch %d\n", 'A' + h, o, t);
     kind = RAISE; objwrite(FBIT(h));
     if
     :: res == REFUSED -> assert(v != 2); ok = 0    /* P3 */
     :: res == FUTURE ->                             /* P3: a seeded record fails the acquisition */
        printf("elector %c: o%d records an epoch above the new epoch %d: the acquisition fails\n", 'A' + h, o, t);
        lockout = 1; assert(!lockout)
     :: else -> skip
     fi
  fi
}

/* ACQ: the budget of raises is spent before object o (or a declaration no object stands for, o = NO) is
 * raised. The design leaves it unraised and reports it (only a declaration, unless MUT_BUDGET_HOLDER); the
 * former rule (every raise commits within a time bound, here the time of R_BUDGET raises) fails the
 * acquisition. */
#ifdef MUT_RAISE_ALL                 /* (i) every raise must commit, or the acquisition fails at the time bound */
#define BUDGET_SPENT(h) \
  printf("elector %c: the time bound (%d raises) passes with listed objects left to raise: the acquisition fails\n", 'A' + h, R_BUDGET); \
  ok = 0; \
  /* P5: an acquisition never fails for the declarations tokenless actors created (only the objects \
   * holders wrote may exceed the budget) */ \
  assert(nhwl > R_BUDGET)
#else
#define BUDGET_SPENT(h) \
  if \
  :: o < NO && ((hw >> o) & 1) -> printf("elector %c: the budget of %d raises is spent: o%d, which a holder wrote, is left unraised (reported)\n", 'A' + h, R_BUDGET, o) \
  :: o < NO && !((hw >> o) & 1) -> printf("elector %c: the budget of %d raises is spent: o%d, a declaration, is left unraised (reported)\n", 'A' + h, R_BUDGET, o) \
  :: else -> printf("elector %c: the budget of %d raises is spent: a declaration is left unraised (reported)\n", 'A' + h, R_BUDGET) \
  fi
#endif

/* An elector. Its acquisition reads the Lease and writes it by compare-and-swap: a swap that succeeds
 * saw the Lease unchanged since the read, so read and write are one step here; one that fails changes
 * nothing and the elector tries again (another elector-role user's free metadata writes of the Lease
 * only make swaps fail). */
proctype Elector(byte h) {
  byte myep, t, o, kind, nlab, nmark, v, res, listed;
  bool gov, dgov, tag, entering, ok, wl;
  ND_DECL
  ACQ_DECL
  do
  :: atomic {
       l_ep < MAXE && (FENCES(h) || !l_fen) ->
       if
       :: l_ex && l_hold != 0 -> printf("time passes: holder %c stops renewing, its Lease (epoch %d) expires\n", 'A' + l_hold - 1, l_ep)
       :: else -> skip
       fi;
       l_ex = 1; l_ep = l_ep + 1; l_hold = h + 1; l_fen = l_fen || FENCES(h);
       myep = l_ep;
       printf("elector %c acquires the Lease at epoch %d and %e\n", 'A' + h, myep,
              (FENCES(h) -> declares_fence_on_acquire : declares_nothing_and_fences_nothing))
     }
     if
     :: FENCES(h) ->
        t = myep;
        atomic {
          listed = (COV(0) -> 1 : 0) | (COV(1) -> 2 : 0); wl = wide;
          printf("elector %c's fence-on-acquire lists the covered objects: %e\n", 'A' + h,
                 (listed == 3 -> o0_and_o1 : (listed == 1 -> o0 : (listed == 2 -> o1 : none))))
          ACQ_LIST
        }
        ok = 1; o = 0;
#ifdef ACQ
        /* pass 0: every object a holder wrote (a record when listed), no budget (HW_BUDGETED: within it);
         * pass 1: the others, the listed objects without a record (o0, o1) in order and the counted
         * declarations, interleaved in any order, at most R_BUDGET raises */
        do
        :: ok && pass == 0 && o < NO && (((listed & hw) >> o) & 1) ->
           if
           :: HW_BUDGETED && nr >= R_BUDGET -> BUDGET_SPENT(h)
           :: else -> raiseobj(h);
              if :: ok -> raised = raised | (1 << o); nr = nr + HW_BUDGETED :: else -> skip fi
           fi;
           o++
        :: ok && pass == 0 && o < NO && !(((listed & hw) >> o) & 1) -> o++
        :: ok && pass == 0 && o >= NO -> PASS1(h)
        :: ok && pass == 1 && o < NO && (((listed & ~hw) >> o) & 1) ->
           if
           :: nr >= R_BUDGET -> BUDGET_SPENT(h)
           :: else -> raiseobj(h);
              if :: ok -> raised = raised | (1 << o); nr++ :: else -> skip fi
           fi;
           o++
        :: ok && pass == 1 && o < NO && !(((listed & ~hw) >> o) & 1) -> o++
        :: ok && pass == 1 && xdone < xlisted ->
           atomic {
             ko = o; o = NO;
             if
             :: nr >= R_BUDGET -> BUDGET_SPENT(h)
             :: else ->
                if
                :: printf("elector %c's raise of a declaration fails (a timeout): the acquisition fails\n", 'A' + h); ok = 0
                :: printf("elector %c raises a declaration to epoch %d\n", 'A' + h, t); nr++
                fi
             fi;
             o = ko; ko = 0;
             xdone++
           }
        :: else -> break
        od;
#else
        do
        :: o < NO && ok && ((listed >> o) & 1) -> raiseobj(h); o++
        :: o < NO && ok && !((listed >> o) & 1) -> o++
        :: else -> break
        od;
#endif
        if
        :: ok ->
           atomic {
             printf("holder %c is handed its token, epoch %d\n", 'A' + h, myep);
             if
             :: myep > handedF ->
                /* P1 (order): every write the copy admitted after the Lease moved on was written over
                 * by a raise, except on an object that entered the coverage late (the residual) */
#ifdef ACQ
                /* ... or on an object the fence left unraised: the holder's first write raises it */
                /* (only to an object no holder had written: the copy decides at the record it holds) */
                assert((!owe[0] || ent[0] || UNRAISED_NHW(1)) && (!owe[1] || ent[1] || UNRAISED_NHW(2)));
                /* late (commit): any object left unraised, a write admitted before the acquisition lands once */
                late[0] = !(listed & 1) || UNRAISED(1) || (wide && !wl); late[1] = !(listed & 2) || UNRAISED(2) || (wide && !wl);
                unr[0] = UNRAISED_NHW(1) != 0; unr[1] = UNRAISED_NHW(2) != 0;
#else
                assert((!owe[0] || ent[0]) && (!owe[1] || ent[1]));
                late[0] = !(listed & 1) || (wide && !wl); late[1] = !(listed & 2) || (wide && !wl);
#endif
                owe[0] = 0; owe[1] = 0; ent[0] = 0; ent[1] = 0;
                handedF = myep;   /* late: not listed (ACQ: not raised), or the policy was widened since the listing */
                elate[0] = !(listed & 1) && !(wide && !wl) ELATE_NOT(1); elate[1] = !(listed & 2) && !(wide && !wl) ELATE_NOT(2)
             :: else -> skip   /* handed out after a later epoch was: its token is stale on arrival */
             fi;
             if :: myep > handedAll -> handedAll = myep :: else -> skip fi;
             tok[h] = myep
           }
        :: else ->
           atomic {
             if
             :: l_ex && l_hold == h + 1 && l_ep == myep -> l_hold = 0;
                printf("elector %c releases the Lease (epoch %d)\n", 'A' + h, myep)
             :: else -> skip
             fi
           }
        fi;
        atomic { myep = 0; wl = 0; t = 0; o = 0; kind = 0; nlab = 0; nmark = 0; v = 0; res = 0; listed = 0; ok = 0
                 ND_RESET ACQ_RESET }
     :: else ->
        atomic {
          if :: myep > handedAll -> handedAll = myep :: else -> skip fi;
          tok[h] = myep;
          printf("holder %c is handed its token, epoch %d (no fence)\n", 'A' + h, myep);
          myep = 0
        }
     fi
  :: atomic {                       /* releases */
       l_ex && l_hold == h + 1 -> l_hold = 0;
       printf("elector %c releases the Lease (epoch %d)\n", 'A' + h, l_ep)
     }
  od
}

/* Holder h's code: it writes with the last token it was handed, even long after it lost the Lease. */
proctype Worker(byte h) {
  byte t, o, kind, nlab, nmark, v, res, mark;
  bool gov, dgov, tag, entering, del;
  ND_DECL
#ifdef ALIAS
  byte route; bool bcov;
#endif
  do
  :: atomic {                       /* the leadership check: the token it was handed */
       tok[h] != 0 -> t = tok[h]; SEL(o);
       if
       :: kind = UPD; nlab = 1; printf("holder %c's code (token %d) sends a write of o%d, labelled in\n", 'A' + h, t, o)
       :: kind = UPD; nlab = 0; printf("holder %c's code (token %d) sends a write of o%d that labels it out\n", 'A' + h, t, o)
#ifdef HOLDER_CREATES
       :: kind = CRE; nlab = 1; printf("holder %c's code (token %d) sends a create of o%d, labelled in\n", 'A' + h, t, o)
#endif
#ifdef DELETES
       :: h == 0 -> kind = UPD; del = 1; printf("holder %c's code (token %d) deletes o%d: first the deletion marker\n", 'A' + h, t, o)
#endif
#ifdef ALIAS
       :: o == 0 -> kind = BIND; printf("holder %c's code (token %d) binds Pod o%d to a node\n", 'A' + h, t, o)
#endif
       fi
       ND_SEL
     }
#ifdef ALIAS
     if
     :: kind == BIND -> bindwrite(); goto next
     :: else -> skip
     fi;
#endif
again:
     if
     :: del -> atomic { nlab = o_lab[o]; nmark = t }   /* the marker write keeps the labels */
     :: else -> skip
     fi;
     objwrite(WBIT(h));
     if
     :: res == REFUSED -> assert(v != 2)                /* P3 */
     :: else -> skip
     fi;
     if
     :: del && res == DONE ->                           /* DELETE, preconditions: the marker write's resourceVersion */
        res = 0;
        do
        :: atomic {
             if
             :: !o_ex[o] -> res = NOTFOUND
             :: o_ex[o] && !(o_ver[o] & WBIT(h)) -> res = CONFLICT;
                printf("    apiserver: o%d changed since the marker write: the DELETE's precondition fails (409)\n", o)
             :: else ->                                 /* the webhook's DELETE rule, on a quorum read */
                gov = COV(o); mark = o_mark[o];
                if
                :: gov && LIVE && mark != l_ep -> v = 1; res = REFUSED;
                   printf("    webhook: DELETE of o%d, marker %d, the Lease is at epoch %d: refused\n", o, mark, l_ep)
                :: else -> printf("    webhook: DELETE of o%d, marker %d, the Lease at epoch %d, %e: admitted\n", o, mark, l_ep,
                                  (LIVE -> held : without_a_live_holder))
                fi
             fi
           }
           if :: res != 0 -> break :: else -> skip fi;
           atomic {
             if
             :: o_ver[o] & WBIT(h) ->
                printf("    apiserver deletes o%d\n", o);
                /* P1 for deletes: none admitted on the marker of an epoch below one handed out commits */
                if :: gov && mark != 0 && mark < handedF -> assert(late[o]) :: else -> skip fi;
                o_ex[o] = 0; o_rec[o] = 0; o_lab[o] = 0; o_mark[o] = 0; o_ver[o] = 0; OTHER(o, 0); owe[o] = 0;
                res = DONE; break
             :: else -> skip
             fi
           }
        od;
        if
        :: res == CONFLICT ->
#ifdef NO_DELETE_RETRY
           /* P3: a tokenless write between the marker and the DELETE fails the holder's delete */
           assert(!(o_other[o] && l_ex && l_ep == t && l_hold == h + 1))
#else
           printf("holder %c's delete of o%d: a conflict, it writes the marker again\n", 'A' + h, o);
           atomic { o_ver[o] = o_ver[o] & ~WBIT(h); res = 0; gov = 0; mark = 0 }
           goto again
#endif
        :: else -> skip
        fi
     :: else -> skip
     fi;
#ifdef ALIAS
next:
#endif
     atomic { o_ver[o] = o_ver[o] & ~WBIT(h);
              t = 0; o = 0; kind = 0; nlab = 0; nmark = 0; v = 0; res = 0; del = 0; mark = 0; gov = 0 ND_RESET }
  od
}


/* the tokenless actors' writes of object k: free, or of an uncovered object (no Lease read decides
 * them, so each is one step), and a DELETE of a covered object once the Lease has no live holder
 * (decided on a quorum read, committed by compare-and-swap). Deletes of uncovered objects are left
 * out: they reach no state a holder's delete does not. */
#define OTHERS_WRITE(k) \
  :: atomic { FINALIZERS && o_ex[k] && o_mark[k] != 0 && o_ver[k] != 0 -> o_ver[k] = 0; OTHER(k, 1); \
              printf("a user without the token adds a finalizer to o%d (free)\n", k) } \
  :: atomic { SEEDS && !COV(k) && !(o_ex[k] && o_rec[k] == MAXE) && !(wide && !o_ex[k]) -> \
              printf("a user without the token %e o%d uncovered, with record %d\n", (o_ex[k] -> writes : creates), k, MAXE); \
              if :: !o_ex[k] -> o_ex[k] = 1; o_lab[k] = 0; o_mark[k] = 0 :: else -> skip fi; \
              o_rec[k] = MAXE; o_ver[k] = 0; OTHER(k, 1) } \
  :: atomic { DELETER && COV(k) && !LIVE -> o = k; o_ver[k] = o_ver[k] | XBIT; \
              printf("a user without the token deletes o%d; webhook: the Lease has no live holder, admitted\n", k) } \
     atomic { \
       if \
       :: o_ver[o] & XBIT -> o_ex[o] = 0; o_rec[o] = 0; o_lab[o] = 0; o_mark[o] = 0; o_ver[o] = 0; \
          OTHER(o, 0); owe[o] = 0; printf("    apiserver deletes o%d\n", o) \
       :: else -> o_ver[o] = o_ver[o] & ~XBIT \
       fi; \
       o = 0 \
     }

/* HEADROOM: a free write that grows covered object k by one unit (finalizers, labels and annotations, a
 * managedFields entry): refused if its result is larger than the stored object and larger than HR_B
 * (PAD_LIMIT; the mutation: only the apiserver's limit HR_L). On an uncovered object no policy bounds it:
 * an object padded before a policy covered it is a residual (docs/design/residuals.md), left out. */
#ifdef HEADROOM
#define OTHERS_PAD(k) \
  :: atomic { COV(k) && SIZE(k) + 1 <= PAD_LIMIT -> o_pad[k]++; o_ver[k] = 0; \
              printf("a user without the token grows o%d with a free write: its size is %d\n", k, SIZE(k)) }
#else
#define OTHERS_PAD(k)
#endif

/* ALIAS: a user without the token who is not the scheduler binds Pod k through either route; a binding
 * carries no token, so the webhook refuses it on a covered Pod (the allowlist frees it for the scheduler
 * and kubelets only); no policy decides it on an uncovered one. */
#ifdef ALIAS
#define OTHERS_BIND(k) \
  :: atomic { o_ex[k] && !o_bnd[k] -> \
       if \
       :: route = SUBR; printf("a user without the token binds Pod o%d to a node through pods/binding\n", k) \
       :: route = ALIASR; printf("a user without the token binds Pod o%d to a node through bindings\n", k) \
       fi; \
       if \
       :: ROUTED(route) && COV(k) -> \
          printf("    webhook: a Binding without a token, not from the scheduler: refused\n") \
       :: else -> \
          if \
          :: !ROUTED(route) -> printf("    apiserver: no webhook rule matches bindings: admitted without a decision\n") \
          :: else -> printf("    webhook: o%d is not covered: no policy, admitted\n", k) \
          fi; \
          bcov = COV(k); \
          assert(!bcov);   /* P6 */ \
          o_bnd[k] = 1; o_ver[k] = 0; printf("    apiserver binds o%d\n", k) \
       fi; \
       route = 0 }
#else
#define OTHERS_BIND(k)
#endif

proctype Others() {
  byte o;
#ifdef ALIAS
  byte route; bool bcov;
#endif
  do
  OTHERS_WRITE(0)
  OTHERS_WRITE(1)
  OTHERS_PAD(0)
  OTHERS_BIND(0)
#ifdef ACQ
  :: atomic { !o_ex[1] && xdecl < MAXDECL -> o_ex[1] = 1; o_lab[1] = 1; o_rec[1] = 0; o_ver[1] = 0;
              printf("a user without the token creates o1, a declaration bound to the Lease (no record)\n") }
  :: atomic { xdecl < MAXDECL - 1 -> xdecl++;
              printf("a user without the token creates another declaration bound to the Lease (%d)\n", xdecl) }
#endif
  :: atomic { LEASE_DELETER && !l_deleted && l_ex -> l_deleted = 1; l_ex = 0; l_hold = 0; l_fen = 0;
              printf("a user who may deletes the Lease (epoch %d)\n", l_ep) }
  :: atomic { WIDENER && !wide -> wide = 1; cov_rec = 0;
              late[0] = late[0] || (o_ex[0] && !o_lab[0]); late[1] = late[1] || (o_ex[1] && !o_lab[1]);
              ent[0] = ent[0] || (o_ex[0] && !o_lab[0]); ent[1] = ent[1] || (o_ex[1] && !o_lab[1]);
              printf("a namespace admin widens the FencingPolicy to every object\n") }
  :: atomic { !cov_rec -> cov_rec = 1; cov_ep = (l_ex -> l_ep : 0);
              printf("the operator records the widened FencingPolicy's coverage epoch %d (a quorum read of the Lease)\n", cov_ep) }
  od
}

proctype Copy() {
  do
  :: atomic { (c_ex != l_ex || c_ep != l_ep || c_held != (l_hold != 0) || c_fen != l_fen) ->
              c_ex = l_ex; c_ep = l_ep; c_held = (l_hold != 0); c_fen = l_fen;
              printf("the webhook's copy catches up: the Lease %e epoch %d\n", (c_ex -> at : deleted_at), c_ep) }
  od
}

init {
  atomic {
#ifdef NO_SEEDS
    o_ex[0] = 1; o_ex[1] = 1;   /* the objects exist, uncovered, without a record */
#endif
#ifdef ACQ
    o_ex[0] = 1;                /* o0 exists, uncovered, without a record; o1 is a declaration if someone creates it */
#endif
    run Elector(0); run Worker(0); run Elector(1); run Worker(1);
#if NH > 2
    run Elector(2); run Worker(2);
#endif
    run Others();
#ifndef NO_COPY
    run Copy()
#endif
  }
}
