/*
 * model.h - the seeded random model check (model.c), run by the fault
 * program for each engine.
 */
#ifndef PX_TEST_MODEL_H
#define PX_TEST_MODEL_H

#include <stddef.h>

struct CMUnitTest;

/* The group's tests (the fault program adds them to its own list, so
 * that its known-problem filter applies to them too). */
const struct CMUnitTest *model_tests(size_t *n);

#endif
