file(REMOVE_RECURSE
  "libllhttp_static.a"
)
