/*
 * vectored.h - the vectored read and write tests (vectored.c), run by the
 * conformance program for each engine.
 */
#ifndef PX_TEST_VECTORED_H
#define PX_TEST_VECTORED_H

/* Run the group; returns the number of failed tests. */
int vectored_run(void);

#endif
