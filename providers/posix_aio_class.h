/*
 * posix_aio_class.h - the POSIX AIO provider's own settings (words rtsig=,
 * aio_threads=, sockets= and file_lanes=), parsed by its class
 * (providers/posix_aio_class.c) and read by providers/posix_aio.c.
 */
#ifndef PX_PROVIDERS_POSIX_AIO_CLASS_H
#define PX_PROVIDERS_POSIX_AIO_CLASS_H

#include <stdbool.h>

#define PX_POSIX_THREADS_MAX 4096u
#define PX_POSIX_LANES_MAX 16u

typedef struct px_posix_settings {
	int rtsig;            /* sigwait's signal; 0 = SIGRTMIN + 4 */
	unsigned threads;     /* glibc helper threads (aio_init); 0 = 256 */
	unsigned lanes;       /* file_lanes: descriptors (the file's and dups)
	                         its requests are spread over; 0 = default */
	bool sockets;         /* sockets=aio: streams on sockets through AIO
	                         too (default: refused, see posix_aio.c) */
} px_posix_settings;

#endif /* PX_PROVIDERS_POSIX_AIO_CLASS_H */
