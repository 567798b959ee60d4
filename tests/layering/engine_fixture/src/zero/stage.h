// A fixture for check_engine_shape.py: a stage seam with one virtual method too many (with --max-stage-virtuals 3)
// and a one-feature method whose default throws.
class Stage {
 public:
  virtual ~Stage() = default;
  virtual void begin_backward(bool boundary) = 0;
  virtual void finish_backward() = 0;
  virtual void write_slice(size_t group) { DS_CHECK(false, "not this stage"); }
  virtual void publish() = 0;
};
