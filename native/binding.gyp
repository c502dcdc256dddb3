{
  "targets": [
    {
      "target_name": "flocklease",
      "sources": ["flocklease.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "defines": ["NAPI_VERSION=8"]
    },
    {
      "target_name": "flocklease-supervisor",
      "type": "executable",
      "sources": ["supervisor.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"]
    }
  ]
}
