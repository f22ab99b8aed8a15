/*
 * bad_input.h - the bad input tests (bad_input.c), run by the conformance
 * program for each engine.
 */
#ifndef PX_TEST_BAD_INPUT_H
#define PX_TEST_BAD_INPUT_H

/* Run the group; returns the number of failed tests. */
int bad_input_run(void);

#endif
