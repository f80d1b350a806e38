file(REMOVE_RECURSE
  "libagentloop.a"
)
