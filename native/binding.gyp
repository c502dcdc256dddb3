{
  "targets": [
    {
      "target_name": "flocklease",
      "sources": ["src/addon.c", "src/args.c", "src/commit.c", "src/env.c", "src/errors.c", "src/faults.c", "src/files.c", "src/watch.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "defines": ["NAPI_VERSION=8"]
    },
    {
      "target_name": "flocklease-supervisor",
      "type": "executable",
      "sources": ["src/supervisor.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"]
    }
  ]
}
