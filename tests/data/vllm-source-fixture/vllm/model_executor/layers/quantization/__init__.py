QuantizationMethods = Literal["toyfp8", "toyint4"]
