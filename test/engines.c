/*
 * engines.c - print every engine configuration the built-in provider
 * classes offer, one per line as "name<TAB>config text".
 *
 * test/meson.build compiles and runs this at configure time to register
 * the per-engine suites (conformance, stress, ...), so a new provider's
 * engines are tested without editing the test build.  It compiles the
 * class list (providers/classes.c) with PX_CLASS_LIST_ONLY, which keeps
 * the classes' data and leaves out the providers' code.
 *
 * Every class contributes each of its waits with each interrupt that wait
 * takes, on a shared and on a dedicated processor.  The name is the class,
 * then the wait when the class has several, then the interrupt when the
 * wait takes several, then "shared" or "dedicated".
 */
#define PX_CLASS_LIST_ONLY 1
#include "classes.c"

#include <stdio.h>

int main(void)
{
	static const char *const procs[] = { "shared", "dedicated" };

	for (const px_provider_class *const *c = px__classes; *c; c++) {
		const px_provider_class *cls = *c;
		for (unsigned w = 0; w < cls->nwaits; w++) {
			const px_wait_desc *wd = &cls->waits[w];
			int nintr = __builtin_popcount(wd->intrs);
			for (int t = PX_INTR_NONE + 1; t < PX_INTR_COUNT; t++) {
				if (!(wd->intrs & (1u << t)))
					continue;
				for (int p = 0; p < 2; p++) {
					printf("%s", cls->name);
					if (cls->nwaits > 1)
						printf("-%s", wd->name);
					if (nintr > 1)
						printf("-%s", px__intr_name(t));
					printf("-%s\tprovider=%s wait=%s interrupt=%s "
					       "processor=%s\n",
					       procs[p], cls->name, wd->name,
					       px__intr_name(t), procs[p]);
				}
			}
		}
	}
	return 0;
}
