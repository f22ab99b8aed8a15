/*
 * proactor.h - completion-based asynchronous I/O for POSIX systems.
 *
 * An application starts operations (stream, file and datagram reads and
 * writes, accept, connect, posted completions, timers) and receives exactly
 * one callback per started operation.  The mechanism underneath (the
 * "engine") is chosen at run time from a configuration: a struct, a one-line
 * text form, or the PX_ENGINE environment variable.
 *
 * Conventions
 *   - Every call returns 0 (or a non-negative count) on success and a
 *     negative errno value on failure.  No call sets or reads errno: each
 *     leaves it as the caller had it (px_handle_events and px_destroy
 *     whatever their callbacks set it to).
 *   - A completion carries the positive errno of the failed operation in
 *     px_completion.error, or 0.
 *   - Any thread may call any function, except where a function says
 *     otherwise.  Callbacks may call back into the proactor (start, post,
 *     cancel, timers) without deadlock.
 *   - Buffers (and iovec arrays) passed to a start function must stay valid
 *     until that operation's callback has been called.  An address
 *     (px_write_dgram, px_connect, px_op_desc.addr) is copied at the
 *     start: the caller may reuse it when the call returns.
 */
#ifndef PROACTOR_H
#define PROACTOR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the library's exported functions (it is built with hidden
 * visibility by default; libproactor.map lists px_* as its interface). */
#if defined(__GNUC__)
#define PX_API __attribute__((visibility("default")))
#else
#define PX_API
#endif

#define PX_VERSION_MAJOR 0
#define PX_VERSION_MINOR 2

typedef struct px_proactor px_proactor;

/* Operation codes, as seen in px_completion.op. */
typedef enum px_op {
	PX_OP_READ_STREAM = 0,
	PX_OP_WRITE_STREAM,
	PX_OP_READ_FILE,
	PX_OP_WRITE_FILE,
	PX_OP_READ_DGRAM,
	PX_OP_WRITE_DGRAM,
	PX_OP_ACCEPT,
	PX_OP_CONNECT,
	PX_OP_POST,
	PX_OP_TIMER,
	PX_OP_CLOSE,            /* px_close */
	PX_OP_COUNT
} px_op;

/* Bit of one operation in an operations mask. */
#define PX_OP_BIT(op) (1u << (op))
/* The eight I/O operations. */
#define PX_OPS_IO                                                              \
	(PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM) |        \
	 PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE) |            \
	 PX_OP_BIT(PX_OP_READ_DGRAM) | PX_OP_BIT(PX_OP_WRITE_DGRAM) |          \
	 PX_OP_BIT(PX_OP_ACCEPT) | PX_OP_BIT(PX_OP_CONNECT))

/*
 * What a callback receives.  The structure lives inside the library and is
 * valid only while the callback runs; copy out what you need.
 */
typedef struct px_completion {
	px_proactor *proactor;  /* the proactor that ran the operation */
	void *user;             /* the user pointer given at start */
	px_op op;               /* what was started */
	int fd;                 /* the descriptor it was started on, or -1 */
	void *buf;              /* the buffer given at start (NULL if none) */
	size_t len;             /* the length given at start */
	size_t bytes;           /* bytes transferred; 0 at end of file/stream */
	int error;              /* 0, or the positive errno of the failure;
	                           ECANCELED when cancelled */
	int new_fd;             /* accept: the accepted socket; otherwise -1 */
	uint64_t offset;        /* file operations: the offset given at start */
	int64_t timer_id;       /* timers: the id px_timer_start returned */
	socklen_t addrlen;      /* length of addr, 0 if none */
	struct sockaddr_storage addr; /* read_dgram: the sender; accept: the
	                           peer; write_dgram/connect: the destination */
	const struct iovec *iov;/* vectored operations: the array given at
	                           start (buf is then NULL and len the sum of
	                           the lengths); otherwise NULL */
	int iovcnt;             /* its number of elements, or 0 */
} px_completion;

/* A completion callback.  Called exactly once per started operation, from a
 * thread inside px_handle_events() (or px_destroy()). */
typedef void px_callback(const px_completion *c);

/* ------------------------------------------------------------------ */
/* Configuration                                                        */
/* ------------------------------------------------------------------ */

typedef enum px_processor_type {
	PX_PROCESSOR_NONE = 0,  /* no processor (secondary absent) */
	PX_PROCESSOR_SHARED,    /* led by threads inside px_handle_events */
	PX_PROCESSOR_DEDICATED  /* has its own permanent leader thread */
} px_processor_type;

/* Sizes of the text fields of px_processor_config, NUL included. */
#define PX_NAME_MAX  16   /* a provider, wait or interrupt name */
#define PX_WORDS_MAX 160  /* a provider's own key=value words */

/* Processor flags (px_processor_config.flags). */
#define PX_PF_START_ANY_THREAD   0x1u  /* allow starts from non-leader threads */
#define PX_PF_START_INTERRUPT    0x2u  /* a start interrupts the leader's wait */
#define PX_PF_FLAGS_SET          0x80u /* flags above are meaningful; without
                                          it the provider's own flags apply */

/*
 * One processor: a provider with its wait and interrupt strategies.
 *
 * Providers, waits and interrupts are named by text, so that a library
 * with more providers keeps this layout.  px_config_parse() fills every
 * field; a program that fills the struct itself may leave a name empty:
 *   provider  ""  = "auto" (the best engine this kernel offers), unless
 *                   wait names a strategy, which then picks its provider;
 *                   auto is for the primary only: a secondary with
 *                   neither provider nor wait is -EINVAL;
 *   wait      ""  = the provider's default wait strategy;
 *   interrupt ""  = the wait strategy's default interrupt;
 * and the primary's processor PX_PROCESSOR_NONE (0, as in a zeroed
 * struct) is PX_PROCESSOR_SHARED.
 * What providers and waits exist, and which combinations are valid, is
 * listed by the error message of a bad choice and in README.md.
 * words carries settings that only one provider understands, written as
 * in the text form and separated by spaces (e.g. "ring=256
 * ring_flags=sqpoll" for provider=uring); "" leaves that provider's
 * defaults.
 */
typedef struct px_processor_config {
	px_processor_type processor;
	char provider[PX_NAME_MAX];
	char wait[PX_NAME_MAX];
	char interrupt[PX_NAME_MAX];
	unsigned flags;          /* PX_PF_*; 0 = the provider's defaults */
	unsigned max_aio;        /* operations in flight; 0 = provider default;
	                            extra starts are deferred, never refused.
	                            The defaults are at least 65536 (io_uring:
	                            its largest completion ring, less its
	                            submission ring), so that no workload within
	                            a usual descriptor limit fills them.  A
	                            smaller limit can be filled by reads that
	                            wait for data while the writes that would
	                            answer them sit deferred: when max_aio is
	                            full, operations are deferred and nothing
	                            has completed for over a second, the
	                            deferred ones are started beyond the limit
	                            and a line on stderr says so (once per
	                            processor).  So max_aio bounds what is in
	                            flight while work flows; it never
	                            deadlocks. */
	uint32_t ops;            /* PX_OP_BIT mask narrowing what this processor
	                            does; 0 = everything the provider does */
	int intr_signo;          /* signal for interrupt=signal; 0 = SIGURG */
	char words[PX_WORDS_MAX];/* the provider's own settings, as text */
} px_processor_config;

/* Follower promotion order (px_config.followers). */
typedef enum px_follower_order {
	PX_FOLLOWERS_LIFO = 0,  /* most recently idle thread first (default) */
	PX_FOLLOWERS_FIFO
} px_follower_order;

/* A whole engine: one or two processors. */
typedef struct px_config {
	px_processor_config primary;
	px_processor_config secondary; /* .processor = PX_PROCESSOR_NONE: none */
	px_follower_order followers;
	unsigned flags;                /* PX_CF_* */
} px_config;

#define PX_CF_NO_ENV 0x1u  /* ignore the PX_ENGINE environment variable */

/*
 * px_config_parse - fill *cfg from the one-line text form.
 *
 * Grammar (whitespace separated key=value words, case sensitive):
 *
 *     config    := [preset] [processor] [';' 'secondary:' processor]
 *     processor := ['primary:'] word*
 *     word      := key '=' value | global
 *
 * Keys every processor takes:
 *       provider=NAME  wait=NAME  interrupt=pipe|eventfd|signal|native
 *       processor=shared|dedicated  max_aio=N  ops=LIST (comma list of
 *       read_stream, write_stream, read_file, write_file, read_dgram,
 *       write_dgram, accept, connect, or the groups stream, file, dgram,
 *       socket, all)  start=any|any-interrupt|leader  signal=N
 * Globals: followers=lifo|fifo
 * Providers built into this version, with their waits and own keys:
 *       select  readiness emulation; wait=epoll|poll|select|linux_rt
 *               (linux_rt: a real-time signal per descriptor, with
 *               processor=dedicated only and interrupt=pipe|signal; its
 *               leader thread keeps SIGRTMIN+3 and SIGIO blocked)
 *       uring   io_uring; wait=uring; ring=N (SQ entries, at most 32768),
 *               ring_flags=LIST (coop_taskrun, sqpoll; sqpoll adds a
 *               polling kernel thread per ring, which pays only where a
 *               CPU can be spared for it), rings=N (0 to 16; 0, the
 *               default, is one per CPU, at most 4; a dedicated
 *               processor has one ring: 0 or 1), read_gate=N (0
 *               to 1000000: once N socket reads would wait in a ring,
 *               new ones wait on an epoll set of the ring instead of an
 *               armed receive, cheaper for a peer in another process,
 *               dearer for one in this process; 0: never.  Not given:
 *               8, for sockets whose other end the engine does not
 *               serve itself; not with sqpoll)
 *       linux_aio  Linux native AIO (libaio); wait=io_getevents|epoll;
 *               depth=N (iocbs in the context, default 1024)
 *       posix   POSIX AIO (glibc); files, and streams on pipes;
 *               wait=aiocb|sigwait|callback, interrupt=native;
 *               rtsig=N (sigwait's signal; -EINVAL with another wait
 *               or for SIGRTMIN+3, linux_rt's),
 *               aio_threads=N (glibc's helper
 *               maximum, set once per process), sockets=refuse|aio
 *               (sockets are refused with -EOPNOTSUPP unless aio: a read
 *               glibc has started cannot be cancelled), file_lanes=N
 *               (descriptors a file's reads are spread over, 1..16,
 *               default 8; dups made as requests pile up, closed when
 *               the file is idle; writes stay on the file's own
 *               descriptor, in order)
 * Presets: auto, and each provider's own (uring, uring-dedicated,
 * linux-aio, linux-aio-dedicated, epoll, poll, select, posix-aio, and the
 * same with "-dedicated", linux-rt-dedicated), and the teams posix-aio+epoll
 * and linux-aio+epoll (POSIX AIO or Linux AIO for files, epoll for
 * everything else).  A preset comes first and the words
 * after it override its values (the primary's, in a team).  Further rules:
 *   - "auto" is the best engine this kernel offers, decided when the
 *     proactor is created (io_uring, else Linux AIO when the processor does
 *     files, teamed with epoll for the sockets as linux-aio+epoll when it
 *     does sockets too and no secondary is given, else epoll); text
 *     without a preset
 *     starts from auto and stays auto while it names no provider or wait.
 *     An interrupt or provider word given to auto narrows its choice to the
 *     engines that take it ("auto interrupt=pipe" is epoll), a provider
 *     word at its default value too ("auto ring=0" is io_uring or
 *     nothing);
 *   - wait=W without provider= keeps the section's provider if it has
 *     W ("linux-aio wait=epoll" is Linux AIO over epoll), else selects
 *     the provider that owns W, so "uring wait=epoll" is the select
 *     provider over epoll;
 *   - when a section's provider changes, the wait, interrupt and provider
 *     words it inherited return to that provider's defaults;
 *   - a key given twice in one section is an error;
 *   - signal=N needs interrupt=signal; N is 1..64 but not SIGKILL,
 *     SIGSTOP or the signals glibc reserves below SIGRTMIN (signal=0,
 *     like no signal=, is the default, SIGURG, and goes with any
 *     interrupt).  Creating a
 *     proactor fails with -EBUSY if the application already handles N;
 *   - a provider's own keys are refused with any other provider;
 *   - wait=sigwait (provider posix) takes completions as a real-time
 *     signal: rtsig=N, or without it the first of SIGRTMIN+4..SIGRTMAX no
 *     other proactor uses and the application does not handle (creating
 *     fails with -EBUSY when there is none, or when rtsig=N is taken).
 *     The application must block that signal in every thread it creates
 *     itself (blocking SIGRTMIN+4..SIGRTMAX covers every choice); the
 *     library blocks it in the thread that creates the proactor, so
 *     threads created after px_create inherit it, and in every thread
 *     that leads.  A thread that leaves it unblocked makes completions up
 *     to a second late, never lost.
 *
 * A NULL text is the empty one (auto), as for px_create; a NULL cfg is
 * -EINVAL.
 * Returns 0, -EINVAL with a message naming the valid choices, or -ENOSYS
 * when the text names a provider this build of the library does not have.
 * The message goes to err (if err is not NULL and errlen > 0; always
 * NUL-terminated).
 */
PX_API int px_config_parse(px_config *cfg, const char *text, char *err, size_t errlen);

/*
 * px_config_format - write the canonical text form of cfg to buf.
 * Returns the length the full text needs (like snprintf), or -EINVAL
 * (also for a NULL cfg).  buf may be NULL, with any len: nothing is
 * written, and the length is returned all the same.
 */
PX_API int px_config_format(const px_config *cfg, char *buf, size_t len);

/* ------------------------------------------------------------------ */
/* Life cycle                                                           */
/* ------------------------------------------------------------------ */

/*
 * px_create - create a proactor from configuration text.
 *
 * text NULL means "auto".  Unless cfg flags say PX_CF_NO_ENV, a non-empty
 * PX_ENGINE environment variable replaces text (it is ignored in setuid and
 * setgid programs).  On failure a message is written to err when given;
 * it begins with "PX_ENGINE: " when the text came from PX_ENGINE.
 *
 * A proactor belongs to the process that made it: in a child made by
 * fork(2) or _Fork, every call on it fails with -ECHILD and does nothing
 * (px_destroy included; px_engine_name, which returns no error, still
 * gives the text); the child may create its own.
 *
 * Returns 0 and stores the proactor in *out, or:
 *   -EINVAL  the text does not parse or names an invalid combination;
 *   -ENOSYS  the engine is not built in or this kernel lacks it;
 *   -ENOMEM, or another -errno from the operating system.
 */
PX_API int px_create(px_proactor **out, const char *text, char *err, size_t errlen);

/* px_create_config - as px_create, from a struct. */
PX_API int px_create_config(px_proactor **out, const px_config *cfg, char *err,
		     size_t errlen);

/*
 * px_destroy - cancel every pending operation, deliver its completion
 * (ECANCELED, or its result if it finished first) in the calling thread,
 * stop dedicated threads and free everything.  Posted completions and
 * pending timers are delivered too.  Starts made from those callbacks fail
 * with -ESHUTDOWN; px_close is still accepted.  No thread may be inside
 * px_handle_events() or start further operations; so it cannot be called
 * from a callback that px_handle_events() runs.  Returns 0 (also for a
 * NULL px), or -EBUSY if a thread, the caller included, is inside
 * px_handle_events(), or if the caller is a callback that px_destroy()
 * itself runs (nothing is freed then).
 */
PX_API int px_destroy(px_proactor *px);

/*
 * px_engine_name - the canonical configuration text of the engine this
 * proactor runs, e.g. "provider=uring wait=uring interrupt=native
 * processor=shared max_aio=61437" (io_uring's defaults).  Valid until
 * px_destroy; "" for a NULL px.
 */
PX_API const char *px_engine_name(const px_proactor *px);

/*
 * px_handle_events - run the event loop once from the calling thread.
 *
 * The thread dispatches completed operations, leads a processor (waits for
 * completions in the OS), or sleeps as a follower, as the dispatcher
 * decides.  Any number of threads may call it at once.  Operations that
 * its callbacks start and that finish within their start (on the
 * readiness and Linux AIO engines; on io_uring none does: they go to the
 * ring at the next lead) have their callbacks run in
 * the same call: in rounds, each of all the completions queued when it
 * begins, a new round only while fewer than 64 callbacks have run in all.
 * The last round is not cut short, so a call may run many more than 64.
 *
 * timeout_ms < 0 waits without limit; 0 does not block.
 * Returns the number of callbacks run (> 0), 0 if the timeout passed with
 * nothing to do, -ESHUTDOWN once px_stop() was called (or while
 * px_destroy runs, from one of its callbacks), or -EINVAL for a NULL px.
 */
PX_API int px_handle_events(px_proactor *px, int timeout_ms);

/*
 * px_stop - make every px_handle_events() call return -ESHUTDOWN as soon as
 * it has finished the callback it runs, now and from now on.  Completions
 * stay queued for px_destroy.  Returns 0, or -EINVAL for a NULL px.
 * Not from a signal handler (no function here is async-signal-safe: it
 * takes the mutex the interrupted thread may hold); let the handler write
 * to a pipe with a px_read_stream pending and call it in that callback.
 */
PX_API int px_stop(px_proactor *px);

/* ------------------------------------------------------------------ */
/* Operations                                                           */
/* ------------------------------------------------------------------ */
/*
 * Every start function returns 0 when the operation is started (its
 * callback will run exactly once), or a negative errno, in which case the
 * callback will never run:
 *   -EBADF      fd is negative or not open, or px_close is closing it,
 *               or it is a descriptor the library holds for an engine
 *               (an epoll instance, eventfd, pipe, io_uring ring, ...
 *               of any proactor: see px_close).
 *               (uring and linux_aio check a descriptor number the first
 *               time they meet it and after px_close has closed it, to
 *               keep a syscall off every start; a descriptor closed with
 *               close(2) after it was used there fails with EBADF in the
 *               completion instead.)
 *   -EINVAL     px or cb is NULL, or len is 0 where data must move or
 *               over SSIZE_MAX, buf is NULL with a length, only one of
 *               an address and its length is given, or an address
 *               length is shorter than a family field or longer than
 *               struct sockaddr_storage;
 *   -EOPNOTSUPP no processor of this engine does the operation;
 *   -ESHUTDOWN  the proactor is being destroyed or was stopped;
 *   -ENOMEM     no memory for the operation record or the tables kept
 *               per descriptor, or the kernel had none to register fd
 *               with the epoll wait;
 *   -ENOSPC     the epoll wait could not register fd: the user's
 *               /proc/sys/fs/epoll/max_user_watches is reached;
 *   -EMFILE     fd is beyond what the wait strategy can watch
 *               (select: FD_SETSIZE).
 * A start may be deferred instead of reaching the engine at once (max_aio
 * operations started, older starts still deferred, or start=leader and the
 * caller not leading).  The engine's checks are then made later: EBADF for
 * a descriptor not open, EMFILE, EOPNOTSUPP for a socket on POSIX AIO,
 * ENOSPC and ENOMEM arrive in the completion's error, with the callback run, and the
 * start returns 0.  A negative fd, a descriptor px_close is closing and
 * the other errors are always returned by the call.
 * Operations on one descriptor and direction are performed in the order
 * they were started.
 */

/* Read up to len bytes from a socket or pipe.  bytes == 0 means end of
 * stream. */
PX_API int px_read_stream(px_proactor *px, int fd, void *buf, size_t len,
		   px_callback *cb, void *user);

/* Write up to len bytes to a socket or pipe; may complete with fewer. */
PX_API int px_write_stream(px_proactor *px, int fd, const void *buf, size_t len,
		    px_callback *cb, void *user);

/* Write all len bytes; completes when all are written or on error (bytes
 * then says how many were written). */
PX_API int px_write_stream_all(px_proactor *px, int fd, const void *buf, size_t len,
			px_callback *cb, void *user);

/* Read or write a file at an offset (as pread/pwrite: the descriptor's
 * own position is neither used nor changed; an offset beyond INT64_MAX
 * fails with EINVAL in the completion). */
PX_API int px_read_file(px_proactor *px, int fd, void *buf, size_t len,
		 uint64_t offset, px_callback *cb, void *user);
PX_API int px_write_file(px_proactor *px, int fd, const void *buf, size_t len,
		  uint64_t offset, px_callback *cb, void *user);

/*
 * Vectored reads and writes: as the functions above, with the data in the
 * iovcnt buffers of iov (filled or sent in array order) instead of one.
 * The array and every buffer it points to stay the caller's and must stay
 * valid and unchanged until the callback has run; the library never
 * writes to the array.  c->iov and c->iovcnt give them back, c->buf is
 * NULL and c->len the sum of the lengths.  px_writev_stream_all resumes
 * after short writes until every byte of every buffer is written.
 * Errors as above, and -EINVAL when iovcnt is not in 1..IOV_MAX, iov is
 * NULL, an element has a NULL base with a length, or the lengths add up
 * to 0 or to more than SSIZE_MAX.  -EOPNOTSUPP when the processor that
 * does the operation has no vectored form of it: the POSIX AIO provider
 * (aio_read/aio_write have none) refuses readv_file/writev_file, and its
 * streams too when it does them itself; every other provider does all
 * five (see README.md).
 */
PX_API int px_readv_stream(px_proactor *px, int fd, const struct iovec *iov,
			   int iovcnt, px_callback *cb, void *user);
PX_API int px_writev_stream(px_proactor *px, int fd, const struct iovec *iov,
			    int iovcnt, px_callback *cb, void *user);
PX_API int px_writev_stream_all(px_proactor *px, int fd,
				const struct iovec *iov, int iovcnt,
				px_callback *cb, void *user);
PX_API int px_readv_file(px_proactor *px, int fd, const struct iovec *iov,
			 int iovcnt, uint64_t offset, px_callback *cb,
			 void *user);
PX_API int px_writev_file(px_proactor *px, int fd, const struct iovec *iov,
			  int iovcnt, uint64_t offset, px_callback *cb,
			  void *user);

/* Receive one datagram; the sender is in c->addr.  len may be 0. */
PX_API int px_read_dgram(px_proactor *px, int fd, void *buf, size_t len,
		  px_callback *cb, void *user);

/* Send one datagram to addr (NULL/0 on a connected socket). */
PX_API int px_write_dgram(px_proactor *px, int fd, const void *buf, size_t len,
		   const struct sockaddr *addr, socklen_t addrlen,
		   px_callback *cb, void *user);

/* Accept a connection on a listening socket; the new socket (close-on-exec
 * and blocking on every engine, whatever the listener's flags) is in
 * c->new_fd and the peer in c->addr.  The readiness engines (select,
 * poll, epoll, linux_rt, and the teams whose sockets they serve) and
 * Linux AIO put a blocking listening socket in
 * non-blocking mode and leave it so, since a connection reset between readiness and accept must
 * not block the thread. */
PX_API int px_accept(px_proactor *px, int listen_fd, px_callback *cb, void *user);

/* Connect a socket to addr.  The socket's file status flags are the same
 * after completion as before (the readiness and Linux AIO engines set
 * O_NONBLOCK on a blocking socket for the length of each connect(2) they
 * make: px_connect(3)).  -EALREADY while another connect on fd has
 * not finished (its callback may start the next one). */
PX_API int px_connect(px_proactor *px, int fd, const struct sockaddr *addr,
	       socklen_t addrlen, px_callback *cb, void *user);

/*
 * px_post - queue a completion with op PX_OP_POST; its callback runs in a
 * thread inside px_handle_events (a sleeping one is woken).  Any thread,
 * but not a signal handler (see px_stop).
 * Returns 0, -EINVAL (px or cb NULL), -ENOMEM or -ESHUTDOWN.
 */
PX_API int px_post(px_proactor *px, px_callback *cb, void *user);

/*
 * Closed descriptors.  An operation pending on a descriptor that the
 * application closes with close(2) completes, on every engine, with EBADF
 * (bytes: what moved before), or with its own result if it finished
 * first: a leader whose waits collect nothing for a while checks the
 * descriptors of the pending operations (fcntl F_GETFD) and cancels those
 * of closed ones.  That takes about a second at most while nothing
 * else completes, about five under steady traffic, and needs a thread in
 * px_handle_events for a shared processor.  The check needs the number
 * to stay closed: if the application opens another file that gets the
 * same number before the pending operations have completed, the
 * behaviour is undefined (they may run on the new file).  The library
 * keeps the descriptors it makes while it runs (POSIX AIO's dups, for
 * one) and the sockets px_accept delivers off such numbers.  POSIX AIO
 * is slower to follow the rule: glibc's aio_cancel refuses a closed
 * number, so a request glibc still holds queued for a helper ends only
 * when a helper comes free, which a stream read on a quiet pipe or socket
 * can delay without limit (README.md).  Use px_close,
 * which cancels, waits and then closes, so that the number is free only
 * once nothing of the proactor refers to it.
 */

/*
 * px_close - cancel every operation pending on fd, wait until each of
 * their callbacks has run and returned, close fd, then call cb once (op
 * PX_OP_CLOSE, fd, error 0 or the errno of close(2)).
 *
 * From the call on, starts on fd fail with -EBADF, until the number is
 * closed (at the latest when cb is queued).
 * The cancelled operations complete with ECANCELED (or their own result
 * if they finished first).  When cb runs the number is closed and may be
 * reused at once: no operation started before it was closed refers to
 * it any more.
 * Until cb has returned, px_accept does not deliver a socket under the
 * number (nor does the library put a descriptor of its own there).
 * Reuse it with a call that takes the lowest free number; dup2 or dup3
 * onto it is safe only while no px_accept is pending: the kernel may give
 * the number to an accepted connection as soon as it is closed, and dup2
 * then closes that connection (px_close(3) says what the accept reports).
 * With nothing pending, fd is closed in the call and cb is queued.
 * Any thread may call it, also from a callback (including a callback of
 * an operation on fd: the close then waits for that callback to return).
 * The close(2) is made by the calling thread when nothing is pending, else
 * by the thread that ran the last of those callbacks; if it waits (a
 * socket with SO_LINGER and unsent data), only that thread waits, the
 * number is free meanwhile, and cb is queued after the wait.
 * px_destroy, or px_stop followed by px_destroy, still runs cb once.
 * Returns 0 (cb will run once), or (cb will not run):
 *   -EINVAL    px or cb is NULL;
 *   -EBADF     fd is negative, or not open and no operation is pending
 *              on it, or a descriptor the library holds for an engine
 *              (of any proactor; left open: the number is not the
 *              application's, a stale one it closed before);
 *   -EALREADY  a px_close of fd is already under way;
 *   -ENOMEM    no memory for the record.
 */
PX_API int px_close(px_proactor *px, int fd, px_callback *cb, void *user);

/*
 * px_cancel - cancel every pending operation started on fd.
 * Each still completes exactly once: with ECANCELED, or with its real result
 * if it finished before the cancel could take effect.
 * Returns how many operations the cancel was requested for (0 if none),
 * -EBADF for a negative fd, or -EINVAL for a NULL px.
 * When it returns, no thread of the proactor is inside a read, write,
 * send, recv, accept or connect on fd for a cancelled operation: if one
 * was (a readiness engine makes those calls itself, with the proactor's
 * lock released), px_cancel waited for that call to return, which is
 * short because the calls do not block (a readiness engine's file read
 * or write, made the same way, lasts as long as the disk takes).  Nor is
 * a Linux AIO request of fd in a batch whose io_submit has not yet
 * looked its descriptor up: px_cancel waits for that io_submit.  So the
 * application may close(2)
 * fd right after px_cancel; the cancelled operations still complete later
 * as described above, and operations started on fd after px_cancel are
 * not covered.  The exception is the POSIX AIO provider: a request that
 * glibc's helper thread is already performing cannot be stopped or waited
 * for (see px_close, which waits for the callbacks).  It ends only when
 * the read or write returns: a stream read on a quiet pipe (or socket, with
 * sockets=aio) then never gets ECANCELED, ETIMEDOUT from a deadline, or
 * EBADF after close(2); px_close's cb and px_destroy wait for it, maybe
 * for good.  See README.md, "Engines and configuration".  Linux AIO
 * performs a file read or write on a descriptor not opened with O_DIRECT
 * inside its io_submit, which px_cancel cannot stop: it waits for that
 * io_submit, and the operation keeps its own result.  (A file read or
 * write on a pipe, socket or terminal, where that
 * would last until data or room came, fails with ESPIPE on both AIO
 * providers instead, as pread does: px_read_file(3).)
 */
PX_API int px_cancel(px_proactor *px, int fd);

/*
 * px_timer_start - call cb (op PX_OP_TIMER, error 0) once, no earlier than
 * delay_ns nanoseconds from now.  Returns the timer id (> 0), or -EINVAL,
 * -ENOMEM, -ESHUTDOWN.
 */
PX_API int64_t px_timer_start(px_proactor *px, uint64_t delay_ns, px_callback *cb,
		       void *user);

/*
 * px_timer_cancel - cancel a pending timer; its callback runs with
 * ECANCELED.  Returns 0, -ENOENT if it already fired (one-shot), was
 * cancelled already or never existed, or -EINVAL for a NULL px.  A one-shot timer whose deadline has passed has
 * fired, even if its callback has not run yet (it then says error 0).
 * px_destroy cancels every timer still waiting to fire (ECANCELED), a
 * one-shot one past its deadline that no thread took out of the heap
 * included, before it runs their callbacks: a px_timer_cancel from one of
 * them returns -ENOENT.  A one-shot timer a thread had already taken as
 * fired, its callback not run before px_stop, still says error 0.
 */
PX_API int px_timer_cancel(px_proactor *px, int64_t id);

/* ------------------------------------------------------------------ */
/* Periodic timers, per-operation deadlines, statistics                 */
/* ------------------------------------------------------------------ */

/*
 * px_timer_periodic - call cb (op PX_OP_TIMER) first no earlier than
 * first_ns nanoseconds from now, then once per period_ns, until
 * px_timer_cancel(px, id) with the id returned here.
 *
 * The deadlines are fixed when the timer starts: the k-th is the first
 * plus k periods, however late a callback runs, so the timer does not
 * drift.  Callbacks of one timer never overlap and none comes early.
 * When whole periods pass before a callback can run (a busy or stalled
 * loop), they are not delivered as a burst: the next callback reports
 * them all.  In each callback with error 0:
 *   c->offset  the deadline (CLOCK_MONOTONIC, ns) of the first expiry
 *              this callback reports;
 *   c->bytes   how many expiries it reports (1, or more after a miss).
 * px_timer_cancel returns 0 once; the timer then ends with exactly one
 * more callback, with error ECANCELED (after the one running, if any).
 * px_destroy cancels it the same way.  (One-shot timers also carry their
 * deadline in c->offset, in every completion: fired, or ECANCELED by
 * px_timer_cancel or px_destroy.)
 *
 * Returns the timer id (> 0), or -EINVAL (px or cb NULL, or period_ns 0),
 * -ENOMEM, -ESHUTDOWN.
 */
PX_API int64_t px_timer_periodic(px_proactor *px, uint64_t first_ns,
				 uint64_t period_ns, px_callback *cb, void *user);

/* Flags of px_op_desc.flags. */
#define PX_OPF_WRITE_ALL 0x1u  /* PX_OP_WRITE_STREAM: as px_write_stream_all */
#define PX_OPF_VECTORED  0x2u  /* read/write stream/file: the data is in
                                  iov/iovcnt (buf NULL, len 0), as
                                  px_readv_stream and the others */

/*
 * One operation to start, for px_start_op: the arguments of the start
 * function of that operation, plus what those functions do not take.
 * Zero every field you do not use (a designated initializer does).
 */
typedef struct px_op_desc {
	px_op op;                    /* PX_OP_READ_STREAM .. PX_OP_CONNECT */
	int fd;                      /* descriptor (accept: listening socket) */
	void *buf;                   /* data buffer (NULL for accept, connect) */
	size_t len;
	uint64_t offset;             /* read_file / write_file only */
	const struct sockaddr *addr; /* write_dgram, connect */
	socklen_t addrlen;
	unsigned flags;              /* PX_OPF_* */
	uint64_t timeout_ns;         /* deadline, ns from now; 0: none */
	px_callback *cb;
	void *user;
	const struct iovec *iov;     /* with PX_OPF_VECTORED only (read only
	                                then, so a px_op_desc built before
	                                these fields existed stays valid) */
	int iovcnt;
} px_op_desc;

/*
 * px_start_op - start the operation d describes, as its own start function
 * would (px_read_stream, ..., px_connect), optionally with a deadline.
 *
 * With timeout_ns > 0 the operation still completes exactly once: with its
 * own result if it finishes first, otherwise with error ETIMEDOUT once
 * timeout_ns nanoseconds have passed (never earlier; it can be later by
 * as long as the thread that runs the loop takes to notice).  c->bytes then
 * says how much was moved before the deadline (a write_all's partial
 * count; 0 for most operations).  Data that arrives after the deadline
 * stays in the descriptor for the next read.  A px_cancel racing the
 * deadline gives one completion, ECANCELED or ETIMEDOUT.  The deadline
 * is a timer of the proactor: it is noticed by a thread inside
 * px_handle_events, like any timer.  What cannot be cancelled cannot be
 * ended by it either: on the POSIX AIO provider, a stream read a glibc
 * helper performs, and a file request with later requests of its
 * descriptor behind it; on every engine, a file read or write already
 * under way, which completes with its own result however late
 * (px_start_op(3)).
 *
 * d is read during the call only.  Returns 0 or, as the start functions,
 * a negative errno (the callback then never runs); -EINVAL also for an
 * op that is not an I/O operation, an unknown flag, or a field that the
 * operation does not take (an offset on a stream, a buffer on accept, an
 * address on anything but write_dgram and connect).
 */
PX_API int px_start_op(px_proactor *px, const px_op_desc *d);

/*
 * Statistics.  Counters are kept under the proactor's mutex at places it
 * is held anyway, so they are always on; px_stats copies them out as one
 * consistent snapshot.  All counts are totals since px_create.
 *
 * I/O operations (those of px_read_stream ... px_connect and px_start_op)
 * are counted where they go, per processor:
 *   started    accepted by a start function (a start that returned an
 *              error is not counted);
 *   deferred   starts that had to wait for room or for the leader;
 *   completed  delivered with their own result, success or error;
 *   cancelled  delivered with ECANCELED (px_cancel, px_destroy);
 *   timed_out  delivered with ETIMEDOUT because their deadline passed;
 *   in_flight  started and not yet delivered, counted from the lists the
 *              operations are on at the time of the snapshot.
 * so that at every snapshot
 *   started == completed + cancelled + timed_out + in_flight.
 */
typedef struct px_proc_stats {
	uint64_t started, deferred, completed, cancelled, timed_out, in_flight;
	uint64_t leader_turns;       /* waits in the OS by its leaders */
	uint64_t leader_interrupts;  /* times its leader was woken by another
	                                thread (a start, a post, a timer) */
	uint64_t wait_ns;            /* time its leaders spent in those waits */
} px_proc_stats;

struct px_stats {
	/* Sums over the processors. */
	uint64_t started, deferred, completed, cancelled, timed_out, in_flight;
	uint64_t leader_turns, leader_interrupts, wait_ns;
	/* The proactor's own. */
	uint64_t posts;              /* px_post callbacks run */
	uint64_t timer_callbacks;    /* timer callbacks run (each callback
	                                of a periodic timer, one that reports
	                                missed expiries counting once, and
	                                those of cancelled timers) */
	uint64_t callbacks;          /* every callback run */
	uint64_t follower_wakeups;   /* sleeping threads woken for work */
	uint64_t follower_sleep_ns;  /* time threads slept as followers */
	uint64_t dispatch_ns;        /* time threads spent running callbacks
	                                (summed over threads, so it can exceed
	                                the elapsed time) */
	unsigned nproc;              /* 1 or 2: entries of proc in use */
	px_proc_stats proc[2];       /* [0] primary, [1] secondary */
};

/*
 * px_stats - copy the proactor's counters to *out (struct px_stats: the
 * function has the type's name, so the type has no typedef).  Any thread, any time
 * (also from a callback), but not from a signal handler: it takes the
 * proactor's mutex briefly and walks the queue of completions waiting for
 * a thread.  Call it now and then (a monitoring tick, or a thread that
 * reports when a signal asks it to), not per operation.
 * Returns 0, or -EINVAL when px or out is NULL.
 */
PX_API int px_stats(px_proactor *px, struct px_stats *out);

/* ------------------------------------------------------------------ */
/* Miscellany                                                           */
/* ------------------------------------------------------------------ */

/* px_strerror - text for a negative (or positive) errno value. Never NULL. */
PX_API const char *px_strerror(int err);

/* px_op_name - "read_stream", "accept", ... or "unknown". */
PX_API const char *px_op_name(px_op op);

#ifdef __cplusplus
}
#endif
#endif /* PROACTOR_H */
