/* `agentloop batch submit | results | status --queue URL`: the producer's
 * and operator's side of fleet mode (docs/batch.md, docs/fleet.md). */
#ifndef AL_CLIENT_BATCH_FLEET_H
#define AL_CLIENT_BATCH_FLEET_H

/* argv[0] is the subcommand ("submit", "results" or "status"); returns
 * the exit status. */
int al__cli_batch_fleet(int argc, char **argv);

#endif
