/*
 * tsan.h - PX_TEST_TSAN is 1 when the program is built with
 * ThreadSanitizer (gcc's __SANITIZE_THREAD__, clang's
 * __has_feature(thread_sanitizer)), else 0.  For the tests that leave out
 * what TSan cannot run (glibc's POSIX AIO helper threads, which it never
 * sees start) or that it slows past their bounds.
 */
#ifndef PX_TEST_TSAN_H
#define PX_TEST_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define PX_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PX_TEST_TSAN 1
#endif
#endif
#ifndef PX_TEST_TSAN
#define PX_TEST_TSAN 0
#endif

#endif
