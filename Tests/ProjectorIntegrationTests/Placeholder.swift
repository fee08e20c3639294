// ProjectorIntegrationTests: tests arrive with their issue; this file keeps the target buildable.
