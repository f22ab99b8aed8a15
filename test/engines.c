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
 * takes, on a shared and on a dedicated processor, except a combination
 * the class's validate hook refuses (linux_rt is for a dedicated processor
 * only).  The name is the class,
 * then the wait when the class has several, then the interrupt when the
 * wait takes several, then "shared" or "dedicated".
 */
#define PX_CLASS_LIST_ONLY 1
#include "classes.c"

#include <stdio.h>
#include <string.h>

/* Does cls accept this combination as a whole (its validate hook)? */
static int accepted(const px_provider_class *cls, const px_wait_desc *wd,
		    int intr, px_processor_type proc)
{
	_Alignas(16) unsigned char settings[PX_SETTINGS_MAX];
	px_processor_config pc;
	char err[256];

	if (!cls->validate)
		return 1;
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.provider, sizeof(pc.provider), "%s", cls->name);
	snprintf(pc.wait, sizeof(pc.wait), "%s", wd->name);
	snprintf(pc.interrupt, sizeof(pc.interrupt), "%s", px__intr_name(intr));
	pc.processor = proc;
	if (cls->settings_init)
		cls->settings_init(settings);
	return cls->validate(settings, &pc, err, sizeof(err)) == 0;
}

/* The text of an operations mask, widest groups first. */
static void print_ops(uint32_t mask)
{
	static const struct {
		const char *name;
		uint32_t bits;
	} groups[] = {
		{ "all", PX_OPS_IO },
		{ "socket", PX_OPS_IO & ~(PX_OP_BIT(PX_OP_READ_FILE) |
					  PX_OP_BIT(PX_OP_WRITE_FILE)) },
		{ "stream", PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM) },
		{ "file", PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE) },
		{ "dgram", PX_OP_BIT(PX_OP_READ_DGRAM) | PX_OP_BIT(PX_OP_WRITE_DGRAM) },
		{ "read_stream", PX_OP_BIT(PX_OP_READ_STREAM) },
		{ "write_stream", PX_OP_BIT(PX_OP_WRITE_STREAM) },
		{ "read_file", PX_OP_BIT(PX_OP_READ_FILE) },
		{ "write_file", PX_OP_BIT(PX_OP_WRITE_FILE) },
		{ "read_dgram", PX_OP_BIT(PX_OP_READ_DGRAM) },
		{ "write_dgram", PX_OP_BIT(PX_OP_WRITE_DGRAM) },
		{ "accept", PX_OP_BIT(PX_OP_ACCEPT) },
		{ "connect", PX_OP_BIT(PX_OP_CONNECT) },
	};
	const char *sep = "";

	for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
		if ((mask & groups[i].bits) != groups[i].bits)
			continue;
		printf("%s%s", sep, groups[i].name);
		sep = ",";
		mask &= ~groups[i].bits;
	}
}

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
					if (!accepted(cls, wd, t,
						      p ? PX_PROCESSOR_DEDICATED
							: PX_PROCESSOR_SHARED))
						continue;
					const px_team_desc *team =
						(cls->native_ops & PX_OPS_IO) != PX_OPS_IO &&
								cls->nteams
							? &cls->teams[0]
							: NULL;
					printf("%s", cls->name);
					if (cls->nwaits > 1)
						printf("-%s", wd->name);
					if (nintr > 1)
						printf("-%s", px__intr_name(t));
					printf("-%s", procs[p]);
					if (team)
						printf("+%s", team->sec_provider);
					printf("\tprovider=%s wait=%s interrupt=%s "
					       "processor=%s",
					       cls->name, wd->name,
					       px__intr_name(t), procs[p]);
					if (team) {
						printf(" ops=");
						print_ops(team->ops);
						printf(" ; secondary: provider=%s",
						       team->sec_provider);
						if (team->sec_wait)
							printf(" wait=%s", team->sec_wait);
						if (team->sec_ops) {
							printf(" ops=");
							print_ops(team->sec_ops);
						}
					}
					printf("\n");
				}
			}
		}
	}
	return 0;
}
