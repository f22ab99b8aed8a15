/*
 * linux_aio_class.h - the Linux AIO provider's own settings (word depth=),
 * parsed by its class (providers/linux_aio_class.c) and read by
 * providers/linux_aio.c when it sets the context up.
 */
#ifndef PX_PROVIDERS_LINUX_AIO_CLASS_H
#define PX_PROVIDERS_LINUX_AIO_CLASS_H

#define PX_LAIO_DEPTH_DEFAULT 1024u  /* io_setup nr_events when depth=0 */
#define PX_LAIO_DEPTH_MAX 1048576u   /* a sanity bound; fs.aio-max-nr rules */

typedef struct px_laio_settings {
	unsigned depth;              /* iocbs in the kernel at once; 0: default */
} px_laio_settings;

#endif /* PX_PROVIDERS_LINUX_AIO_CLASS_H */
