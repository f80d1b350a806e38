file(REMOVE_RECURSE
  "libal_mockllm.a"
)
