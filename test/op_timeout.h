/*
 * op_timeout.h - the per-operation deadline tests (op_timeout.c), run by
 * the conformance program for each engine.
 */
#ifndef PX_TEST_OP_TIMEOUT_H
#define PX_TEST_OP_TIMEOUT_H

/* Run the group; returns the number of failed tests. */
int op_timeout_run(void);

#endif
