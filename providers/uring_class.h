/*
 * uring_class.h - the io_uring provider's own settings (words ring=,
 * ring_flags=, rings= and read_gate=), parsed by its class (providers/uring_class.c) and read by
 * providers/uring.c when it sets the ring up.
 */
#ifndef PX_PROVIDERS_URING_CLASS_H
#define PX_PROVIDERS_URING_CLASS_H

#define PX_URING_RING_MAX 32768u     /* IORING_MAX_ENTRIES */
#define PX_URING_RINGS_KEY_MAX 16u   /* rings= (PX_URING_RINGS_MAX) */

/* ring_flags bits. */
#define PX_URING_COOP_TASKRUN 0x1u   /* IORING_SETUP_COOP_TASKRUN (5.19) */
#define PX_URING_SQPOLL       0x2u   /* IORING_SETUP_SQPOLL */

typedef struct px_uring_settings {
	unsigned entries;            /* SQ entries; 0 = the provider's default */
	unsigned flags;              /* PX_URING_* */
	unsigned rings;              /* rings; 0 = one per CPU, at most 4 */
	/* read_gate=: socket reads waiting in a ring from which a new one
	 * waits on the ring's epoll set instead of an armed poll ("Gated
	 * reads" in uring.c); PX_URING_GATE_DEFAULT when not given, 0 for
	 * never.  Stored plus one, so that 0 means "not given". */
	unsigned gate1;
} px_uring_settings;

#define PX_URING_GATE_MAX 1000000u

#endif /* PX_PROVIDERS_URING_CLASS_H */
