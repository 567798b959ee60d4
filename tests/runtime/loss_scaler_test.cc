// placeholder until the loss scaler lands
