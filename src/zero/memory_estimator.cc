// placeholder until the estimator lands
