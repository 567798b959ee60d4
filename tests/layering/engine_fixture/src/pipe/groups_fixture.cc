// A fixture for check_engine_shape.py: a subsystem that makes its own process group instead of asking the rank grid
// (comm/mesh.h) for it.
void make_groups() {
  // comm::new_group in a comment is not a call.
  data_group_ = comm::new_group(ranks);
}
